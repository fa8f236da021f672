"""convlog.client's own overhead per call, next to a bare httpx request to the same endpoint in
the same run (target: the client's p50 <= 1.2x the bare request's).

A ``convlog serve`` of its own (embedded log, a fresh database) holds one conversation of
``--messages`` messages; then the context GET is timed alternately through ``ConvlogClient``
(typed answer, error mapping, retry loop) and through a bare ``httpx.Client`` with the same
pool, headers and query, reading the JSON body (what any app does with the answer). Twice: over
TCP to the real service (the client's cost inside a real round trip), and against an
``httpx.MockTransport`` answering the same body (the client's cost alone, without the server's
noise). Also the async client against a bare ``httpx.AsyncClient`` over TCP.

    CONVLOG_DATABASE_URL=... python bench/client.py [--requests N] [--messages N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from convlog.client import AsyncConvlogClient, ConvlogClient

TOKEN = "bench-token"  # noqa: S105 - a local benchmark's token
USER, CONVERSATION, MODEL, BUDGET = "u", "bench", "gpt-4o", 8000
PARAMS = {"model": MODEL, "budget_tokens": BUDGET}
PATH = f"/v1/users/{USER}/conversations/{CONVERSATION}/context"
TEXT = "加班申请提交之后，审批流程是直属主管、部门经理，外包员工还需要驻场负责人先确认。"


@contextmanager
def served(admin_url: str) -> Iterator[str]:
    name = f"convlog_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    with tempfile.TemporaryDirectory() as tmp:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {
            **os.environ,
            "CONVLOG_DATABASE_URL": make_conninfo(admin_url, dbname=name),
            "CONVLOG_DATA_DIR": tmp,
            "CONVLOG_HTTP_PORT": str(port),
            "CONVLOG_SUMMARIZER": "off",
            "CONVLOG_API_TOKENS": f"bench:{TOKEN}",
            "CONVLOG_LOG_LEVEL": "warning",
        }
        env.pop("CONVLOG_KAFKA_BOOTSTRAP", None)
        process = subprocess.Popen(
            [sys.executable, "-m", "convlog.cli.main", "serve"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(Path(tmp) / "err").open("wb"),
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("convlog serve did not start: " + (Path(tmp) / "err").read_text())
                time.sleep(0.1)
            yield url
        finally:
            process.terminate()
            process.wait(30)
            with psycopg.connect(admin_url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def alternate(requests: int, **calls: Callable[[], object]) -> dict[str, float]:
    """p50 (microseconds) of each call, the calls taking turns so drift hits them alike."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(requests // 10):  # warm-up
        for call in calls.values():
            call()
    for _ in range(requests):
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


async def alternate_async(requests: int, client: AsyncConvlogClient, bare: httpx.AsyncClient) -> dict[str, float]:
    times: dict[str, list[float]] = {"client": [], "bare": []}
    for i in range(requests + requests // 10):
        started = time.perf_counter()
        await client.context(USER, CONVERSATION, model=MODEL, budget_tokens=BUDGET)
        middle = time.perf_counter()
        (await bare.get(PATH, params=PARAMS)).raise_for_status()
        ended = time.perf_counter()
        if i >= requests // 10:
            times["client"].append(middle - started)
            times["bare"].append(ended - middle)
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


def report(title: str, p50: dict[str, float]) -> None:
    ratio = p50["client"] / p50["bare"]
    print(
        f"{title:<32} client p50 {p50['client']:8.1f} us   bare httpx p50 {p50['bare']:8.1f} us   "
        f"ratio {ratio:4.2f}x  ({'ok' if ratio <= 1.2 else 'over'} the 1.2x target)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--messages", type=int, default=40)
    args = parser.parse_args()
    admin = os.environ.get("CONVLOG_DATABASE_URL")
    if not admin:
        raise SystemExit("set CONVLOG_DATABASE_URL (make services-up)")
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}
    with (
        served(admin) as url,
        ConvlogClient(url, token=TOKEN) as client,
        httpx.Client(base_url=url, headers=headers, timeout=10.0) as bare,
    ):
        last = None
        for i in range(args.messages // 2):
            client.append(USER, CONVERSATION, {"role": "user", "content": f"{i}: {TEXT}"})
            last = client.append(USER, CONVERSATION, {"role": "assistant", "content": f"{i}: {TEXT}"})
        assert last is not None
        client.context(USER, CONVERSATION, model=MODEL, budget_tokens=BUDGET, min_offset=last.offset)
        answer = bare.get(PATH, params=PARAMS)
        body, answer_headers = answer.content, dict(answer.headers)

        def bare_call() -> object:
            response = bare.get(PATH, params=PARAMS)
            response.raise_for_status()
            return response.json()

        print(f"context GET of a {args.messages}-message conversation, {args.requests} requests each")
        report(
            "sync, over TCP to convlog serve",
            alternate(
                args.requests,
                client=lambda: client.context(USER, CONVERSATION, model=MODEL, budget_tokens=BUDGET),
                bare=bare_call,
            ),
        )

        async def over_tcp() -> dict[str, float]:
            async with (
                AsyncConvlogClient(url, token=TOKEN) as aclient,
                httpx.AsyncClient(base_url=url, headers=headers, timeout=10.0) as abare,
            ):
                return await alternate_async(args.requests, aclient, abare)

        report("async, over TCP to convlog serve", asyncio.run(over_tcp()))

    canned = httpx.MockTransport(lambda _request: httpx.Response(200, content=body, headers=answer_headers))
    with (
        ConvlogClient("http://mock", token=TOKEN, transport=canned) as mclient,
        httpx.Client(base_url="http://mock", headers=headers, transport=canned) as mbare,
    ):

        def mock_bare() -> object:
            response = mbare.get(PATH, params=PARAMS)
            response.raise_for_status()
            return response.json()

        report(
            "sync, canned answer (no server)",
            alternate(
                args.requests * 10,
                client=lambda: mclient.context(USER, CONVERSATION, model=MODEL, budget_tokens=BUDGET),
                bare=mock_bare,
            ),
        )


if __name__ == "__main__":
    main()
