"""API reads that go to the log on Kafka: the events endpoint and ``as_of`` of a short conversation.

One service on a topic of its own, two conversations of 4 messages each: one appended by
convlog's producer, one by a transactional producer (each turn one Kafka transaction, as a
Spring Kafka or Kafka Streams app writes: a commit marker after each turn, so the offsets the
index names are not dense and a read drains the fetched batch). For each reader variant —
the broker's fetch wait (``fetch_max_wait_ms``: 500 is aiokafka's default) and whether the
reader's partitions stay fetching between reads ("keep", the old reader) or are paused
("pause") — the reader consumer is started afresh, ``--reads`` reads of each kind are timed
back to back, then the requests the reader sends to the broker while nobody reads are counted
for ``--idle`` seconds (taken from its client: fetches, list-offsets, metadata).

    CONVLOG_KAFKA_BOOTSTRAP=... CONVLOG_DATABASE_URL=... python bench/kafka_reads.py [--reads 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

import events.kafka_log
from convlog.runtime.serve import running_service
from convlog.settings import Settings
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from query_api.http import create_app
from tests.kafka.transactional import transactional_app

TOKEN = "bench-token"  # noqa: S105 - a local benchmark's token
KEY = ConversationKey("bench", "u", "short")
TX_KEY = ConversationKey("bench", "u", "transactional")
VARIANTS = [("keep", 500), ("keep", 100), ("keep", 50), ("pause", 500), ("pause", 100), ("pause", 50)]


def count_requests(log: KafkaEventLog, counter: Counter[str]) -> None:
    """Counts every request the reader consumer's client sends, by request type."""
    client: Any = log._consumer._client  # type: ignore[union-attr]
    send = client.send

    async def counted(node_id: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        counter[type(request).__name__.removesuffix("Request")] += 1
        return await send(node_id, request, *args, **kwargs)

    client.send = counted


async def timed(reads: int, client: httpx.AsyncClient, url: str, params: dict[str, Any] | None = None) -> float:
    times = []
    for _ in range(reads):
        started = time.perf_counter()
        response = await client.get(url, params=params)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text
    return statistics.median(times) * 1000


async def variant(log: KafkaEventLog, client: httpx.AsyncClient, mode: str, wait_ms: int, args: Any) -> str:
    if log._consumer is not None:
        await log._consumer.stop()
        log._consumer, log._next = None, {}
    events.kafka_log._READER_FETCH_WAIT_MS = wait_ms
    KafkaEventLog._rest = ORIGINAL_REST if mode == "pause" else keep_fetching  # type: ignore[method-assign,assignment]
    await log.end_offsets()  # starts the reader
    counter: Counter[str] = Counter()
    count_requests(log, counter)
    results = []
    for key in (KEY, TX_KEY):
        path = f"/v1/users/{key.user_id}/conversations/{key.conversation_id}"
        events_ms = await timed(args.reads, client, f"{path}/events")
        as_of_ms = await timed(
            args.reads, client, f"{path}/context", {"model": "gpt-4o", "budget_tokens": 4000, "as_of": 1_000_000}
        )
        results.append(f"{key.conversation_id}: /events {events_ms:5.1f} ms, as_of {as_of_ms:5.1f} ms")
    per_read = sum(counter.values()) / (4 * args.reads)
    counter.clear()
    await asyncio.sleep(args.idle)
    idle = ", ".join(f"{k} {v / args.idle:.1f}/s" for k, v in sorted(counter.items())) or "none"
    return (
        f"{mode:5} fetch_max_wait_ms={wait_ms:3}: p50 {'; '.join(results)}; "
        f"{per_read:.1f} requests per read; idle: {idle}"
    )


ORIGINAL_REST = KafkaEventLog._rest


def keep_fetching(_log: KafkaEventLog, _consumer: Any) -> None:
    """The old reader: its partitions stay fetching between reads."""


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reads", type=int, default=20)
    parser.add_argument("--idle", type=float, default=5.0)
    args = parser.parse_args()
    admin, bootstrap = os.environ.get("CONVLOG_DATABASE_URL"), os.environ.get("CONVLOG_KAFKA_BOOTSTRAP")
    if not admin or not bootstrap:
        raise SystemExit("set CONVLOG_DATABASE_URL and CONVLOG_KAFKA_BOOTSTRAP (make services-up)")
    name = f"convlog_bench_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(
                database_url=make_conninfo(admin, dbname=name),
                data_dir=Path(tmp),
                partitions=12,
                kafka_bootstrap=bootstrap,
                topic=f"bench.{uuid.uuid4().hex[:12]}",
            )
            env = {"CONVLOG_API_TOKENS": f"bench:{TOKEN}", "CONVLOG_SUMMARIZER": "off"}
            async with running_service(settings, env) as service:
                producer = service.deps.producer
                for i in range(2):
                    await producer.append_user(KEY, f"question {i}", message_id=f"u{i}")
                    await producer.append_assistant(KEY, f"answer {i}", message_id=f"a{i}")
                async with transactional_app(bootstrap, settings.topic, settings.partitions) as (app, kafka):
                    for i in range(2):
                        async with kafka.transaction():
                            await app.append_user(TX_KEY, f"question {i}", message_id=f"u{i}")
                            last = await app.append_assistant(TX_KEY, f"answer {i}", message_id=f"a{i}")
                transport = httpx.ASGITransport(app=create_app(service.deps))
                auth = {"Authorization": f"Bearer {TOKEN}"}
                async with httpx.AsyncClient(transport=transport, base_url="http://bench", headers=auth) as client:
                    r = await client.get(
                        f"/v1/users/u/conversations/{TX_KEY.conversation_id}/context",
                        params={"model": "gpt-4o", "budget_tokens": 4000, "min_offset": last.offset},
                    )
                    assert r.status_code == 200, r.text
                    assert isinstance(service.event_log, KafkaEventLog)
                    for mode, wait_ms in VARIANTS:
                        print(await variant(service.event_log, client, mode, wait_ms, args), flush=True)
    finally:
        async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


if __name__ == "__main__":
    asyncio.run(main())
