"""Context endpoint latency next to a raw indexed last-N SELECT through the same pool.

Two conversations, 100 and 10,000 messages, are appended to an embedded log and projected
into a fresh database; then the context endpoint (in-process ASGI, FastAPI included) and a raw
``SELECT ... ORDER BY seq DESC LIMIT 20`` are timed alternately. Twice: once with the
summarizer running (the offline model; timing starts when its summary covers every turn that
left the window, as in a deployment), once without (then every turn is still in the context by
design, and the 10,000-message case is not flat). With ``--formats``, the same contexts are
also served in every provider format (each with a model of that provider), and each format's
p50 is reported as a ratio to the Chat Completions path's in the same run (target <= 1.2).

Then the same data is served by a ``convlog serve`` process and timed over one kept-alive
socket, next to that server's ``/healthz`` (the HTTP floor) and the raw SELECT. Timing starts
after ``ANALYZE``, as in a deployment a minute after such a load (autovacuum's).

Sealing (issue 25, on by default): with ``--sealing both`` (the default) every scenario is
loaded twice, side by side (two databases, two services, then two ``convlog serve``), and
timed with the two's requests alternating, sealing off and on (``CONVLOG_SEALING``: the log records and the
read-model rows sealed under each conversation's key, opened on every read), and the sealed
p50s are reported as ratios to the plain ones (target at 100 messages: <= 1.10).

    CONVLOG_DATABASE_URL=... python bench/context.py [--requests N] [--formats] [--sealing both|on|off]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
from http_path import call, serve_process  # bench/ is a script's first path entry
from psycopg import sql
from psycopg.conninfo import make_conninfo
from table import Row, print_table

from convlog.runtime.serve import Service, running_service
from convlog.settings import Settings
from events.keys import ConversationKey
from query_api.http import create_app

TOKEN = "bench-token"  # noqa: S105 - a local benchmark's token
# The model each format is served for: a provider's own, so estimated formats pay their estimate.
FORMAT_MODELS = {
    "chat_completions": "gpt-4o",
    "responses": "gpt-5",
    "anthropic": "claude-sonnet-4-5",
    "gemini": "gemini-2.5-pro",
}
BUDGET = 8000  # a typical context budget (the model's window is larger; the app keeps costs down)
TEXT = "加班申请提交之后，审批流程是直属主管、部门经理，外包员工还需要驻场负责人先确认。"


async def fill(service: Service, key: ConversationKey, messages: int) -> int:
    producer = service.deps.producer
    last = None
    for i in range(messages // 2):
        await producer.append_user(key, f"{i}: {TEXT}", message_id=f"u{i}")
        last = await producer.append_assistant(key, f"{i}: {TEXT}", message_id=f"a{i}")
    assert last is not None
    return last.offset


async def summarized(service: Service, key: ConversationKey, timeout_s: float = 300) -> None:
    """Until the summarizer's summary covers every turn that left the window."""
    reads = await service.deps.queries.reads()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        inputs = await reads.context_inputs(key, encoding="o200k_base")
        if inputs and inputs.summary and inputs.window_start == inputs.summary.covers_through_seq + 1:
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"the summarizer did not catch up on {key} within {timeout_s}s")


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


@dataclass
class Setup:
    """One scenario's database, data directory and the two conversations' keys, sealing on or off."""

    sealing: bool
    url: str
    data_dir: Path
    schema: str = ""
    keys: tuple[ConversationKey, ConversationKey] = (
        ConversationKey("bench", "u", "small"),
        ConversationKey("bench", "u", "big"),
    )
    times: dict[str, list[float]] = field(default_factory=dict)

    def raw_query(self) -> sql.Composed:
        return sql.SQL("SELECT * FROM {}.transcript WHERE conversation_key = %s ORDER BY seq DESC LIMIT 20").format(
            sql.Identifier(self.schema)
        )

    def add(self, label: str, started: float) -> None:
        self.times.setdefault(label, []).append(time.perf_counter() - started)


def over_socket(setups: list[Setup], requests: int) -> None:
    """p50 inputs over one kept-alive connection to each setup's ``convlog serve`` (all of them
    up at once, their requests alternating): the HTTP floor (``/healthz``), each context, and the
    raw last-20 SELECT on a connection of this process (what the target allows twice)."""
    tree = Path(__file__).resolve().parent.parent
    with ExitStack() as stack:
        served = []
        for setup in setups:
            env = {"CONVLOG_SEALING": "true" if setup.sealing else "false"}
            port = stack.enter_context(serve_process(setup.url, setup.data_dir, tree, env=env))
            db = stack.enter_context(psycopg.connect(setup.url))
            served.append((setup, http.client.HTTPConnection("127.0.0.1", port, timeout=10), db, setup.raw_query()))
        for round_ in range(requests + requests // 10):  # the first tenth warms up
            measured = round_ >= requests // 10
            for setup, conn, db, raw_query in served if round_ % 2 else reversed(served):
                started = time.perf_counter()
                assert call(conn, "GET", "/healthz")[0] == 200
                if measured:
                    setup.add("healthz", started)
                for label, key in zip(("100", "10k"), setup.keys, strict=True):
                    path = (
                        f"/v1/users/u/conversations/{key.conversation_id}/context?model=gpt-4o&budget_tokens={BUDGET}"
                    )
                    started = time.perf_counter()
                    status, body = call(conn, "GET", path)
                    assert status == 200, body[:300]
                    if measured:
                        setup.add(f"sock{label}", started)
                    started = time.perf_counter()
                    db.execute(raw_query, [str(key)]).fetchall()
                    if measured:
                        setup.add(f"sraw{label}", started)


@asynccontextmanager
async def fresh_database(admin_url: str) -> AsyncIterator[str]:
    name = f"convlog_bench_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(admin_url, dbname=name)
    finally:
        async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


async def loaded(stack: AsyncExitStack, setup: Setup, *, summarize: bool) -> tuple[Service, httpx.AsyncClient]:
    """``setup``'s service, running (on ``stack``), its conversations appended, summarized and
    projected, the planner's statistics gathered; and an in-process client of its API."""
    settings = Settings(
        database_url=setup.url,
        data_dir=setup.data_dir,
        partitions=4,
        api_tokens=f"bench:{TOKEN}",
        summarizer="on" if summarize else "off",
        sealing=setup.sealing,
    )
    service = await stack.enter_async_context(running_service(settings))
    small, big = setup.keys
    offsets = [await fill(service, small, 100), await fill(service, big, 10_000)]
    if summarize:
        await summarized(service, small)
        await summarized(service, big)
    transport = httpx.ASGITransport(app=create_app(service.deps))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    client = await stack.enter_async_context(
        httpx.AsyncClient(transport=transport, base_url="http://bench", headers=auth)
    )
    setup.schema = (await service.deps.queries.reads()).schema
    for key, offset in zip(setup.keys, offsets, strict=True):  # wait until projected
        r = await client.get(
            f"/v1/users/u/conversations/{key.conversation_id}/context",
            params={"model": "gpt-4o", "budget_tokens": 1_000_000, "min_offset": offset},
        )
        assert r.status_code == 200, r.text
    # The planner's statistics of the tables just loaded, as autovacuum gathers them
    # within a minute of such a load: without, it plans the summary lookup for the few
    # rows an empty table's statistics promise (a bitmap scan and sort of every summary
    # of the conversation instead of the newest by the primary key: +0.07 ms at 10,000).
    async with service.pool.connection() as conn:
        await conn.execute("ANALYZE")
    return service, client


async def in_process(setup: Setup, service: Service, client: httpx.AsyncClient, formats: list[str]) -> None:
    """One round of requests to ``setup``'s in-process API, and the raw SELECT after each."""
    raw_query = setup.raw_query()
    for label, key in zip(("100", "10k"), setup.keys, strict=True):
        path = f"/v1/users/u/conversations/{key.conversation_id}/context"
        for fmt in formats:
            started = time.perf_counter()
            r = await client.get(path, params={"model": FORMAT_MODELS[fmt], "budget_tokens": BUDGET, "format": fmt})
            setup.add(f"{fmt}{label}", started)
            assert r.status_code == 200, r.text
        started = time.perf_counter()
        r = await client.get(path, params={"model": "gpt-4o", "budget_tokens": BUDGET})
        setup.add(f"ctx{label}", started)
        assert r.status_code == 200
        started = time.perf_counter()
        async with service.pool.connection() as conn, conn.cursor() as cur:
            await cur.execute(raw_query, [str(key)])
            await cur.fetchall()
        setup.add(f"raw{label}", started)


async def scenario(
    admin_url: str, requests: int, *, summarize: bool, sealings: list[bool], formats: bool = False
) -> dict[bool, dict[str, float]]:
    """Every setup of ``sealings`` loaded side by side, then timed with their requests
    alternating (in-process, then over a socket): the machine's load moves them alike."""
    served_formats = [f for f in FORMAT_MODELS if f != "chat_completions"] if formats else []
    async with AsyncExitStack() as outer:
        setups = []
        for sealing in sealings:
            url = await outer.enter_async_context(fresh_database(admin_url))
            setups.append(Setup(sealing, url, Path(outer.enter_context(tempfile.TemporaryDirectory()))))
        async with AsyncExitStack() as inner:
            running = [(setup, *await loaded(inner, setup, summarize=summarize)) for setup in setups]
            for i in range(requests):
                for setup, service, client in running if i % 2 else reversed(running):
                    await in_process(setup, service, client, served_formats)
        # the same data, served by `convlog serve` over a real socket (the embedded log is free now)
        over_socket(setups, requests)
    return {
        setup.sealing: {f"{k}_{q}": percentile(v, q) * 1000 for k, v in setup.times.items() for q in (50, 95)}
        for setup in setups
    }


def scenario_rows(r: dict[str, float], how: str, *, formats: bool) -> list[Row]:
    """One scenario's rows: the context next to the raw SELECT, in-process and over a socket."""
    rows: list[Row] = []
    for size in ("100", "10k"):
        ratio = r[f"ctx{size}_95"] / r[f"raw{size}_95"]
        rows.append(
            Row(
                f"{how}: in-process context p95, {size} msgs / raw last-20 p95",
                f"{r[f'ctx{size}_95']:.2f} / {r[f'raw{size}_95']:.2f} ms = {ratio:.2f}",
                "<= 3",
                ratio <= 3,
            )
        )
    for size in ("100", "10k"):
        allowed = r["healthz_50"] + 2 * r[f"sraw{size}_50"]
        rows.append(
            Row(
                f"{how}: socket context p50, {size} msgs (healthz {r['healthz_50']:.2f} ms, raw "
                f"last-20 {r[f'sraw{size}_50']:.2f} ms)",
                f"{r[f'sock{size}_50']:.2f} ms",
                f"<= healthz + 2 x raw = {allowed:.2f} ms",
                r[f"sock{size}_50"] <= allowed,
            )
        )
    flat = r["sock10k_50"] / r["sock100_50"]
    if how.startswith("summarizer on"):
        rows.append(Row(f"{how}: flatness, socket p50 10,000 / 100 msgs", f"{flat:.2f}", "<= 1.2", flat <= 1.2))
    else:  # every turn stays in the context by design: a figure, not a target
        rows.append(Row(f"{how}: socket p50 10,000 / 100 msgs (all turns served)", f"{flat:.2f}"))
    for fmt in (f for f in FORMAT_MODELS if formats and f != "chat_completions"):
        for size in ("100", "10k"):
            ratio = r[f"{fmt}{size}_50"] / r[f"ctx{size}_50"]
            rows.append(
                Row(f"{how}: {fmt} p50 / chat_completions p50, {size} msgs", f"{ratio:.2f}", "<= 1.2", ratio <= 1.2)
            )
    return rows


def sealing_rows(plain: dict[str, float], sealed: dict[str, float], how: str) -> list[Row]:
    """The sealed scenario's p50s as ratios to the plain one's (the raw SELECT's beside them,
    which say how much the machine's load moved between the two)."""
    rows: list[Row] = []
    for size, messages in (("100", 100), ("10k", 10_000)):
        for where, ctx, raw in (("in-process", "ctx", "raw"), ("socket", "sock", "sraw")):
            ratio = sealed[f"{ctx}{size}_50"] / plain[f"{ctx}{size}_50"]
            raw_ratio = sealed[f"{raw}{size}_50"] / plain[f"{raw}{size}_50"]
            rows.append(
                Row(
                    f"{how}: {where} context p50, {size} msgs, sealed / plain (raw SELECT's ratio)",
                    f"{sealed[f'{ctx}{size}_50']:.3f} / {plain[f'{ctx}{size}_50']:.3f} ms = {ratio:.2f} "
                    f"({raw_ratio:.2f})",
                    "<= 1.10" if messages == 100 else "",
                    ratio <= 1.10 if messages == 100 else None,
                )
            )
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--formats", action="store_true", help="also serve every provider format")
    parser.add_argument("--sealing", choices=("both", "on", "off"), default="both")
    parser.add_argument("--summarizer", choices=("both", "on", "off"), default="both")
    args = parser.parse_args()
    admin = os.environ.get("CONVLOG_DATABASE_URL")
    if not admin:
        raise SystemExit("set CONVLOG_DATABASE_URL (make services-up)")
    sealings = [s for s in (False, True) if args.sealing == "both" or (args.sealing == "on") == s]
    rows: list[Row] = []
    for summarize in (s for s in (True, False) if args.summarizer == "both" or (args.summarizer == "on") == s):
        how = "summarizer on" if summarize else "no summarizer"
        results = await scenario(admin, args.requests, summarize=summarize, sealings=sealings, formats=args.formats)
        for sealing in sealings:
            rows += scenario_rows(
                results[sealing], f"{how}, sealing {'on' if sealing else 'off'}", formats=args.formats
            )
        if len(results) == 2:
            rows += sealing_rows(results[False], results[True], how)
    print_table(f"bench/context.py ({args.requests} requests each; in-process ASGI and over a real socket)", rows)


if __name__ == "__main__":
    asyncio.run(main())
