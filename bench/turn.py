"""One chat turn as an app sees it, over a real socket to ``convlog serve``: ``POST …/messages``,
then ``GET …/context?min_offset=<that offset>`` (read-your-writes), then the assistant's append.

A ``convlog serve`` process (a fresh database; the embedded log, and with
``CONVLOG_KAFKA_BOOTSTRAP`` set also Kafka, on a topic of its own) gets a 100-message history,
then ``--turns`` turns on one kept-alive connection. Each turn also asks for the same context
again, already projected, so the run measures its own baseline: the target is turn (append +
read-your-writes context) p50 <= 1.5 x (append p50 + already-projected context p50), i.e. waiting
for the projection adds at most half; freshness (``convlog_freshness_seconds``, append ack ->
readable, as the server measured it) p99 <= 20 ms.

    CONVLOG_DATABASE_URL=... [CONVLOG_KAFKA_BOOTSTRAP=...] python bench/turn.py [--turns N]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from http_path import call, serve_process  # bench/ is a script's first path entry
from psycopg import sql
from psycopg.conninfo import make_conninfo
from table import Row, print_table

URL = "/v1/users/u/conversations/c"
CONTEXT = URL + "/context?model=gpt-4o&budget_tokens=8000"


def turns(conn: http.client.HTTPConnection, n: int) -> dict[str, list[float]]:
    def append(role: str, content: str) -> int:
        status, body = call(conn, "POST", f"{URL}/messages", {"role": role, "content": content})
        assert status == 202, body
        return int(json.loads(body)["offset"])

    for i in range(50):  # the 100-message history
        append("user", f"q{i}")
        last = append("assistant", f"a{i}")
    assert call(conn, "GET", f"{CONTEXT}&min_offset={last}")[0] == 200
    times: dict[str, list[float]] = {"append": [], "read-your-writes": [], "projected": [], "turn": []}
    for i in range(n):
        t0 = time.perf_counter()
        offset = append("user", f"turn {i}")
        t1 = time.perf_counter()
        status, body = call(conn, "GET", f"{CONTEXT}&min_offset={offset}")
        t2 = time.perf_counter()
        assert status == 200, body
        assert json.loads(body)["messages"][-1]["content"] == f"turn {i}"
        assert call(conn, "GET", CONTEXT)[0] == 200
        t3 = time.perf_counter()
        times["append"].append(t1 - t0)
        times["read-your-writes"].append(t2 - t1)
        times["projected"].append(t3 - t2)
        times["turn"].append(t2 - t0)
        append("assistant", f"answer {i}")
    return times


def freshness_p99_bound(metrics: str) -> tuple[int, float | None]:
    """(waits, the smallest histogram bucket holding 99% of them, in seconds)."""
    buckets = []
    for line in metrics.splitlines():
        if line.startswith("convlog_freshness_seconds_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((float(le), float(line.split()[-1])))
    total = buckets[-1][1] if buckets else 0.0
    bound = next((le for le, count in buckets if count >= 0.99 * total), None)
    return int(total), bound


def run(admin: str, n: int, kafka: str | None) -> list[Row]:
    name = f"convlog_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as db:
        db.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    extra = {"CONVLOG_KAFKA_BOOTSTRAP": kafka, "CONVLOG_TOPIC": f"convlog.bench.turn.{uuid.uuid4().hex[:8]}"}
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            serve_process(
                make_conninfo(admin, dbname=name),
                Path(tmp),
                Path(__file__).resolve().parent.parent,
                env=extra if kafka else None,
            ) as port,
        ):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            times = turns(conn, n)
            metrics = call(conn, "GET", "/metrics")[1].decode()
    finally:
        with psycopg.connect(admin, autocommit=True) as db:
            db.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    p50 = {step: statistics.median(values) * 1000 for step, values in times.items()}
    on = "Kafka" if kafka else "embedded"
    allowed = 1.5 * (p50["append"] + p50["projected"])
    waits, bound = freshness_p99_bound(metrics)
    return [
        Row(f"{on}: append p50", f"{p50['append']:.2f} ms"),
        Row(f"{on}: context, already projected, p50", f"{p50['projected']:.2f} ms"),
        Row(f"{on}: read-your-writes context p50", f"{p50['read-your-writes']:.2f} ms"),
        Row(
            f"{on}: turn (append + read-your-writes) p50",
            f"{p50['turn']:.2f} ms",
            f"<= 1.5 x (append + projected) = {allowed:.2f} ms",
            p50["turn"] <= allowed,
        ),
        Row(
            f"{on}: freshness p99 ({waits} waits, histogram bucket)",
            "none waited" if bound is None else f"<= {bound * 1000:g} ms",
            "<= 20 ms",
            bound is None or bound <= 0.020,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    admin = os.environ.get("CONVLOG_DATABASE_URL")
    if not admin:
        raise SystemExit("set CONVLOG_DATABASE_URL (make services-up)")
    rows = run(admin, args.turns, None)
    if kafka := os.environ.get("CONVLOG_KAFKA_BOOTSTRAP"):
        rows += run(admin, args.turns, kafka)
    print_table(f"bench/turn.py ({args.turns} turns over a kept-alive socket to convlog serve)", rows)


if __name__ == "__main__":
    main()
