"""One chat turn's read-your-writes: ``POST …/messages`` then ``GET …/context?min_offset=``.

In-process ASGI against ``convlog serve``'s service on the embedded log and a fresh database:
a 100-message conversation, then turns of user append + context at the append's offset +
assistant append. Prints p50/p99 of the append, of the read-your-writes context, of the same
context again (already projected), and the freshness wait the server measured
(``convlog_freshness_seconds``).

    CONVLOG_DATABASE_URL=... python bench/turn.py [--turns N] [--kafka BOOTSTRAP]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from convlog.runtime.serve import running_service
from convlog.settings import Settings
from query_api.http import create_app

TOKEN = "bench-token"  # noqa: S105 - a local benchmark's token
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
URL = "/v1/users/u/conversations/c"
PARAMS = {"model": "gpt-4o", "budget_tokens": 8000}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def turns(client: httpx.AsyncClient, n: int) -> dict[str, list[float]]:
    for i in range(50):  # the 100-message history
        await client.post(f"{URL}/messages", json={"role": "user", "content": f"q{i}"}, headers=HEADERS)
        last = await client.post(f"{URL}/messages", json={"role": "assistant", "content": f"a{i}"}, headers=HEADERS)
    await client.get(f"{URL}/context", params=PARAMS | {"min_offset": last.json()["offset"]}, headers=HEADERS)
    times: dict[str, list[float]] = {"append": [], "read-your-writes": [], "projected": []}
    for i in range(n):
        t0 = time.perf_counter()
        posted = await client.post(f"{URL}/messages", json={"role": "user", "content": f"turn {i}"}, headers=HEADERS)
        t1 = time.perf_counter()
        fresh = await client.get(f"{URL}/context", params=PARAMS | {"min_offset": posted.json()["offset"]},
                                 headers=HEADERS)  # fmt: skip
        t2 = time.perf_counter()
        await client.get(f"{URL}/context", params=PARAMS, headers=HEADERS)
        t3 = time.perf_counter()
        assert fresh.status_code == 200, fresh.text
        assert fresh.json()["messages"][-1]["content"] == f"turn {i}"
        times["append"].append(t1 - t0)
        times["read-your-writes"].append(t2 - t1)
        times["projected"].append(t3 - t2)
        await client.post(f"{URL}/messages", json={"role": "assistant", "content": f"answer {i}"}, headers=HEADERS)
    return times


async def main(admin: str, n: int, kafka: str | None = None) -> None:
    name = f"convlog_bench_{uuid.uuid4().hex[:12]}"
    async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(database_url=make_conninfo(admin, dbname=name), data_dir=Path(tmp), partitions=4,
                                api_tokens=f"bench:{TOKEN}", summarizer="off", kafka_bootstrap=kafka,
                                topic=f"convlog.bench.turn.{uuid.uuid4().hex[:8]}")  # fmt: skip
            async with running_service(settings) as service:
                transport = httpx.ASGITransport(app=create_app(service.deps))
                async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as client:
                    times = await turns(client, n)
                    metrics = (await client.get("/metrics")).text
    finally:
        async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    print(f"{'step (ms)':<20}{'p50':>8}{'p99':>8}")
    for step, values in times.items():
        print(f"{step:<20}{pct(values, 0.5):>8.2f}{pct(values, 0.99):>8.2f}")
    # What waiting for the projection adds: the fresh read next to the same read once projected.
    wait = [fresh - projected for fresh, projected in zip(times["read-your-writes"], times["projected"], strict=True)]
    print(f"{'wait (rw - projected)':<20}{pct(wait, 0.5):>8.2f}{pct(wait, 0.99):>8.2f}")
    sums = dict(line.split() for line in metrics.splitlines() if line.startswith("convlog_freshness_seconds_"))
    count = float(sums.get("convlog_freshness_seconds_count", "0"))
    if count:
        mean_ms = float(sums["convlog_freshness_seconds_sum"]) / count * 1000
        print(f"convlog_freshness_seconds: {count:.0f} waits, mean {mean_ms:.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--kafka", help="Kafka bootstrap servers (default: the embedded log)")
    admin_url = os.environ.get("CONVLOG_DATABASE_URL")
    if not admin_url:
        raise SystemExit("set CONVLOG_DATABASE_URL (make services-up)")
    args = parser.parse_args()
    asyncio.run(main(admin_url, args.turns, args.kafka))
