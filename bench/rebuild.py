"""``convlog rebuild`` throughput next to raw aiokafka consumption of the same topic, same run.

1. Writes N message events over C conversations to a fresh topic (not timed; as bench/project.py).
2. Raw consume: one aiokafka consumer reads the topic from offset 0 to its end.
3. Rebuild: the ``convlog rebuild`` code path (group-less Kafka reader, projector, COPY, one
   transaction per batch, progress bar) builds a new version from offset 0 beside an empty live
   one, in a temporary database that is dropped afterwards.
4. The CPU budget, as in bench/project.py (the raw COPY is not measured here).

    CONVLOG_KAFKA_BOOTSTRAP=... CONVLOG_DATABASE_URL=... python bench/rebuild.py [--events N]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import psycopg
from project import fresh_topic, print_cpu_budget, raw_consume, services_from_env, token_counting_s, transcript_rows
from psycopg import sql
from psycopg.conninfo import make_conninfo

from convlog.ops.rebuilding import RebuildOptions, rebuild
from convlog.settings import Settings
from projectors.migrate import migrate
from projectors.pg import open_pool
from projectors.tokens import TokenCounter
from projectors.versions import create_version


async def timed_rebuild(bootstrap: str, topic: str, url: str, batch_size: int, workers: int | None) -> float:
    await migrate(url)
    pool = await open_pool(url, max_size=1, name="bench")
    async with pool.connection() as conn:
        await create_version(conn)  # the (empty) live version the rebuild builds beside
    await pool.close()
    settings = Settings(kafka_bootstrap=bootstrap, database_url=url, topic=topic)
    started = time.perf_counter()
    code = await rebuild(settings, RebuildOptions(batch_size=batch_size, workers=workers), asyncio.Event())
    elapsed = time.perf_counter() - started
    assert code == 0, code
    return elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=5000)
    parser.add_argument("--workers", type=int, help="default: as convlog rebuild chooses")
    args = parser.parse_args()
    bootstrap, admin_url = services_from_env()
    topic = await fresh_topic(bootstrap, "rebuild", args.events, args.conversations)

    consume_s, raw_records = await raw_consume(bootstrap, topic, args.events)
    transcript, core_s = transcript_rows(raw_records)
    tokens_s = token_counting_s(transcript, TokenCounter())
    del raw_records, transcript
    database = f"convlog_bench_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    try:
        url = make_conninfo(admin_url, dbname=database)
        rebuild_s = await timed_rebuild(bootstrap, topic, url, args.batch_size, args.workers)
    finally:
        async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))

    n = args.events
    raw, rate = n / consume_s, n / rebuild_s
    print(f"raw aiokafka consume        {raw:>10,.0f} events/s  ({consume_s:.2f} s)")
    setup = f"batch {args.batch_size}, workers {args.workers or 'auto'}"
    print(f"convlog rebuild             {rate:>10,.0f} events/s  ({rebuild_s:.2f} s, {setup})")
    print(f"ratio rebuild / raw consume {rate / raw:>10.2f}   (target >= 0.50)")
    print_cpu_budget(n, raw, {"raw consume": consume_s, "decode+validate+fold": core_s, "token counting": tokens_s})


if __name__ == "__main__":
    asyncio.run(main())
