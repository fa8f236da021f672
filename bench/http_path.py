"""The HTTP path's cost over a real socket: p50 of ``GET /healthz`` (the server stack's floor)
and of the context GET of a ``--messages``-message conversation, on one kept-alive connection.

A ``convlog serve`` of its own (embedded log, a fresh database) per source tree given with
``--tree`` (default: this checkout), so that two versions of the server stack are measured in
the same run, their requests taking turns so drift hits them alike:

    git archive <base> | tar -x -C /tmp/base
    CONVLOG_DATABASE_URL=... python bench/http_path.py --tree /tmp/base --tree .

(Not ``bench/http.py``: a script's directory comes first on the path, and that name would hide
the standard library's ``http`` from every bench script.)

The client is the standard library's ``http.client`` (the lightest there is), so the figures
are the server's more than the client's.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from table import Row, print_table

TOKEN = "bench-token"  # noqa: S105 - a local benchmark's token
USER, CONVERSATION = "u", "bench"
BASE = f"/v1/users/{USER}/conversations/{CONVERSATION}"
CONTEXT = BASE + "/context?model=gpt-4o&budget_tokens=100000"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}
# The raw floor: a bare asyncio server answering every request head with a canned response, in a
# process of its own as the service is — what a socket round trip costs this client, no stack.
RAW_SERVER = """
import asyncio
ANSWER = (b"HTTP/1.1 200 OK\\r\\ncontent-type: application/json\\r\\ncontent-length: 15\\r\\n\\r\\n"
          b'{"status":"ok"}')
class Raw(asyncio.Protocol):
    def connection_made(self, transport): self.transport, self.buffer = transport, b""
    def data_received(self, data):
        self.buffer += data
        while b"\\r\\n\\r\\n" in self.buffer:
            _, self.buffer = self.buffer.split(b"\\r\\n\\r\\n", 1)
            self.transport.write(ANSWER)
async def main():
    server = await asyncio.get_running_loop().create_server(Raw, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
"""
TEXT = "The approval flow goes to the line manager, then the department head; contractors need the site lead first."


@contextmanager
def served(admin_url: str, tree: Path) -> Iterator[int]:
    """The port of a ``convlog serve`` running the code of ``tree`` on a fresh database."""
    name = f"convlog_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            serve_process(make_conninfo(admin_url, dbname=name), Path(tmp), tree) as port,
        ):
            yield port
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@contextmanager
def serve_process(url: str, data_dir: Path, tree: Path, *, env: dict[str, str] | None = None) -> Iterator[int]:
    """The port of a ``convlog serve`` (no summarizer; the embedded log in ``data_dir`` unless
    ``env`` names Kafka) on ``url``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    environ = {
        **os.environ,
        "CONVLOG_DATABASE_URL": url,
        "CONVLOG_DATA_DIR": str(data_dir),
        "CONVLOG_HTTP_PORT": str(port),
        "CONVLOG_SUMMARIZER": "off",
        "CONVLOG_API_TOKENS": f"bench:{TOKEN}",
        "CONVLOG_LOG_LEVEL": "warning",
        "PYTHONPATH": str(tree),
    }
    environ.pop("CONVLOG_KAFKA_BOOTSTRAP", None)
    environ |= env or {}
    errors = data_dir / "serve.err"
    process = subprocess.Popen(
        [sys.executable, "-m", "convlog.cli.main", "serve"],
        env=environ,
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=errors.open("wb"),
    )
    try:
        deadline = time.monotonic() + 60
        while not _ready(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"convlog serve ({tree}) did not start: " + errors.read_text())
            time.sleep(0.2)
        yield port
    finally:
        process.terminate()
        process.wait(30)


@contextmanager
def raw_server() -> Iterator[int]:
    process = subprocess.Popen([sys.executable, "-c", RAW_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield int(process.stdout.readline())
    finally:
        process.terminate()
        process.wait(30)


def _ready(port: int) -> bool:
    try:
        return call(http.client.HTTPConnection("127.0.0.1", port, timeout=2), "GET", "/readyz")[0] == 200
    except OSError:
        return False


def call(conn: http.client.HTTPConnection, method: str, path: str, body: object = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    headers = HEADERS if data is None else {**HEADERS, "Content-Type": "application/json"}
    conn.request(method, path, body=data, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def fill(conn: http.client.HTTPConnection, messages: int) -> None:
    """``messages`` messages, then one read-your-writes context: all of them projected."""
    offset = 0
    for i in range(messages):
        role = "user" if i % 2 == 0 else "assistant"
        status, body = call(conn, "POST", BASE + "/messages", {"role": role, "content": f"{i}: {TEXT}"})
        assert status == 202, body
        offset = json.loads(body)["offset"]
    status, body = call(conn, "GET", f"{CONTEXT}&min_offset={offset}")
    assert status == 200, body
    assert len(json.loads(body)["messages"]) == messages, body[:300]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, action="append", help="a source tree to serve (repeatable)")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--messages", type=int, default=100)
    args = parser.parse_args()
    admin = os.environ.get("CONVLOG_DATABASE_URL")
    if not admin:
        raise SystemExit("set CONVLOG_DATABASE_URL (make services-up)")
    trees = [tree.resolve() for tree in args.tree or [Path()]]
    with ExitStack() as stack:
        conns = [
            http.client.HTTPConnection("127.0.0.1", stack.enter_context(served(admin, tree)), timeout=10)
            for tree in trees
        ]
        for conn in conns:
            fill(conn, args.messages)
        raw = http.client.HTTPConnection("127.0.0.1", stack.enter_context(raw_server()), timeout=10)
        calls = {"healthz": "/healthz", "context": CONTEXT}
        times: dict[tuple[int, str], list[float]] = {(i, name): [] for i in range(len(conns)) for name in calls}
        raw_times: list[float] = []
        for round_ in range(args.requests + args.requests // 10):  # the first tenth warms up
            started = time.perf_counter()
            call(raw, "GET", "/healthz")
            if round_ >= args.requests // 10:
                raw_times.append(time.perf_counter() - started)
            for i, conn in enumerate(conns):
                for name, path in calls.items():
                    started = time.perf_counter()
                    status, _ = call(conn, "GET", path)
                    elapsed = time.perf_counter() - started
                    assert status == 200, (trees[i], name, status)
                    if round_ >= args.requests // 10:
                        times[i, name].append(elapsed)
        floor = statistics.median(raw_times) * 1e3
        rows = [Row("raw floor: a bare asyncio server's canned answer, p50", f"{floor:.2f} ms")]
        for i, tree in enumerate(trees):
            p50 = {name: statistics.median(times[i, name]) * 1e3 for name in calls}
            label = "" if len(trees) == 1 else f" ({tree})"
            rows += [
                Row(f"GET /healthz p50{label}", f"{p50['healthz']:.2f} ms"),
                Row(f"context of {args.messages} messages p50{label}", f"{p50['context']:.2f} ms"),
            ]
        print_table(f"bench/http_path.py ({args.requests} requests each over one kept-alive socket)", rows)


if __name__ == "__main__":
    main()
