"""Projector throughput next to the serial ceiling of raw consumption + raw COPY, same run.

1. Writes N message events over C conversations to a fresh topic (not timed).
2. Raw consume: one aiokafka consumer reads the topic from offset 0 to its end.
3. Raw COPY: the transcript rows of the same events (computed beforehand, token counts
   included) are COPYed into a fresh table of the same shape.
   The serial ceiling is N / (consume time + COPY time).
4. The projector (decode, validate, fold, token counting, COPY, state upserts, positions —
   one transaction per batch) projects the same topic into a fresh read-models version.
5. The CPU budget: what each step no projector can skip costs per event, measured alone —
   raw consume and COPY (above), convlog's pure core (decode, validate, fold) and tiktoken
   (both encodings, the same texts) — and the ratio bound they leave on one core and when
   spread perfectly over every core with nothing else running.

    CONVLOG_KAFKA_BOOTSTRAP=... CONVLOG_DATABASE_URL=... python bench/project.py [--events N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from events.codec import default_codec
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from events.producer import ConversationProducer
from projectors.fold import BatchInputs, decode_batch, fold_batch
from projectors.log_source import LogSource
from projectors.migrate import migrate
from projectors.pg import open_pool
from projectors.rows import TRANSCRIPT_COLUMNS, column_list, transcript_copy_rows
from projectors.runner import Projector
from projectors.state import TranscriptRow, countable_text
from projectors.store import PostgresProjectionStore
from projectors.tokens import ENCODINGS, TokenCounter
from projectors.versions import ProjectionVersion, create_version
from projectors.window import WindowPolicy

TEXT = "提交之后审批流程是怎样的？外包员工需要驻场负责人先确认，再由直属主管和供应商管理员审批。"


def services_from_env() -> tuple[str, str]:
    """(Kafka bootstrap, Postgres URL) as `make services-up` / `devservices env` give them."""
    bootstrap, url = os.environ.get("CONVLOG_KAFKA_BOOTSTRAP"), os.environ.get("CONVLOG_DATABASE_URL")
    if not bootstrap or not url:
        raise SystemExit("set CONVLOG_KAFKA_BOOTSTRAP and CONVLOG_DATABASE_URL (make services-up)")
    return bootstrap, url


async def fresh_topic(bootstrap: str, bench: str, events: int, conversations: int) -> str:
    """A new topic holding ``events`` message events over ``conversations`` (written untimed)."""
    topic = f"bench.{bench}.{uuid.uuid4().hex[:8]}"
    print(f"writing {events} events over {conversations} conversations to {topic} ...")
    await write_events(bootstrap, topic, events, conversations)
    return topic


async def write_events(bootstrap: str, topic: str, n: int, conversations: int) -> None:
    log = await KafkaEventLog.connect(bootstrap=bootstrap, topic=topic, partitions=12)
    producer = ConversationProducer(log, producer="bench")

    async def writer(w: int) -> None:
        for i in range(w, n, 64):
            c = i % conversations
            key = ConversationKey("bench", f"user-{c % 97}", f"conv-{c}")
            if (i // conversations) % 2 == 0:
                await producer.append_user(key, f"{i}: {TEXT}")
            else:
                await producer.append_assistant(key, f"{i}: {TEXT * 2}", model="gpt-4o-mini", finish_reason="stop")

    await asyncio.gather(*(writer(w) for w in range(64)))
    await log.close()


async def raw_consume(bootstrap: str, topic: str, n: int) -> tuple[float, list[object]]:
    # read_committed like every convlog reader: the ceiling does the same work
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                                isolation_level="read_committed")  # fmt: skip
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(12)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    records: list[object] = []
    started = time.perf_counter()
    while len(records) < n:
        batches = await consumer.getmany(timeout_ms=1000, max_records=2000)
        for messages in batches.values():
            records.extend(messages)
    elapsed = time.perf_counter() - started
    await consumer.stop()
    return elapsed, records


def transcript_rows(raw_records: Sequence[object]) -> tuple[list[TranscriptRow], float]:
    """The transcript rows the projector writes for these aiokafka records, and the seconds the
    pure core took to decode, validate and fold them (one core, no I/O)."""
    from events.kafka_log import to_log_record  # noqa: PLC0415

    records = [to_log_record(r) for r in raw_records]
    started = time.perf_counter()
    decoded = decode_batch(records, codec=default_codec(), max_event_bytes=1 << 20)
    transcript = fold_batch(decoded, BatchInputs({}), policy=WindowPolicy()).transcript
    return transcript, time.perf_counter() - started


def token_counting_s(rows: Sequence[TranscriptRow], counter: TokenCounter) -> float:
    """Seconds tiktoken takes for the rows' counts, both encodings (what the projector counts)."""
    texts = [countable_text(r) for r in rows]
    reasoning = [r.reasoning_content or "" for r in rows]
    started = time.perf_counter()
    for encoding in ENCODINGS:
        counter.count_many(texts, encoding)
        counter.count_many(reasoning, encoding)
    return time.perf_counter() - started


def print_cpu_budget(n: int, baseline: float, parts: dict[str, float]) -> None:
    """What the work the projector cannot skip costs per event, measured alone on one core, and
    the ratio that leaves: tiktoken alone on one core, and everything spread perfectly over all
    cores with nothing else (broker, Postgres) running."""
    cores = os.cpu_count() or 1
    print(f"cost per event, each measured alone (budget for the target: {1e6 / (baseline / 2):.1f} us):")
    for name, seconds in parts.items():
        print(f"  {name:<26}{seconds / n * 1e6:>8.1f} us")
    tokens = n / parts["token counting"]
    spread = n / (sum(parts.values()) / cores)
    print(f"ratio bound, token counting on one core {tokens / baseline:>5.2f}; "
          f"all of the above on {cores} cores {spread / baseline:.2f}")  # fmt: skip


async def raw_copy(pool: AsyncConnectionPool[Any], rows: Sequence[tuple[Any, ...]]) -> tuple[ProjectionVersion, float]:
    """COPY ``rows`` into a scratch table shaped like a new version's transcript: (version, s)."""
    table = f"bench_copy_{uuid.uuid4().hex[:8]}"
    async with pool.connection() as conn:
        version = await create_version(conn)
        await conn.execute(
            sql.SQL("CREATE TABLE {} (LIKE {}.transcript)").format(
                sql.Identifier(table), sql.Identifier(version.schema)
            )
        )
        await conn.commit()
        started = time.perf_counter()
        async with conn.cursor() as cur:
            statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
                sql.Identifier(table), sql.SQL(column_list(TRANSCRIPT_COLUMNS))
            )
            async with cur.copy(statement) as copy:
                for row in rows:
                    await copy.write_row(row)
        await conn.commit()
        copy_s = time.perf_counter() - started
        await conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(table)))
        await conn.commit()
    return version, copy_s


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=2000)
    args = parser.parse_args()
    bootstrap, url = services_from_env()
    topic = await fresh_topic(bootstrap, "project", args.events, args.conversations)
    await migrate(url)
    pool = await open_pool(url, name="bench")
    counter = TokenCounter()

    consume_s, raw_records = await raw_consume(bootstrap, topic, args.events)
    # The same transcript rows the projector writes, computed outside the timing.
    transcript, core_s = transcript_rows(raw_records)
    tokens_s = token_counting_s(transcript, counter)
    rows = transcript_copy_rows(transcript, counter)
    version, copy_s = await raw_copy(pool, rows)

    log = await KafkaEventLog.connect(bootstrap=bootstrap, topic=topic, partitions=12)
    store = PostgresProjectionStore(pool, schema=version.schema, codec=default_codec(), counter=counter,
                            policy=WindowPolicy(), max_event_bytes=1 << 20)  # fmt: skip
    projector = Projector(LogSource(log), store, batch_size=args.batch_size, fetch_timeout_s=0.2)
    until = await log.end_offsets()
    started = time.perf_counter()
    await projector.run(asyncio.Event(), until=until)
    project_s = time.perf_counter() - started
    await log.close()
    await pool.close()

    n = args.events
    ceiling = n / (consume_s + copy_s)
    rate = n / project_s
    print(f"raw aiokafka consume        {n / consume_s:>10,.0f} events/s  ({consume_s:.2f} s)")
    print(f"raw COPY of the same rows   {n / copy_s:>10,.0f} rows/s    ({copy_s:.2f} s)")
    print(f"serial ceiling              {ceiling:>10,.0f} events/s")
    print(f"convlog projector           {rate:>10,.0f} events/s  ({project_s:.2f} s, batch {args.batch_size})")
    print(f"ratio projector / ceiling   {rate / ceiling:>10.2f}   (target >= 0.50)")
    parts = {"raw consume": consume_s, "raw COPY": copy_s, "decode+validate+fold": core_s, "token counting": tokens_s}
    print_cpu_budget(n, ceiling, parts)


if __name__ == "__main__":
    asyncio.run(main())
