"""Projector throughput next to the necessary-work ceiling of the same records, same run.

1. Writes N message events over C conversations to a fresh topic (not timed).
2. The necessary-work ceiling (issue 16): the steps no projector can skip, each timed alone on
   the same records — raw aiokafka consume, fastavro decode of each record's body, one
   ``o200k_base`` count per message text, and COPY of the rows the projector writes per event
   (transcript, event ids, event index) into a fresh version's tables, with their indexes. The
   ceiling is N / (the sum of those times). The old raw baseline (consume + COPY into an
   unindexed transcript copy) is printed beside it.
3. The projector (decode, validate, fold, token counting, COPY, state upserts, positions —
   one transaction per batch) projects the same topic into a fresh read-models version.
4. The CPU budget: what each step costs per event, measured alone, and what the projector
   spends per event beyond the ceiling's steps.

Ends with one markdown table ``| figure | value | target | met |`` (docs/performance.md).

    CONVLOG_KAFKA_BOOTSTRAP=... CONVLOG_DATABASE_URL=... python bench/project.py [--events N]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from fastavro import parse_schema, schemaless_reader
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from events.codec import HEADER_SIZE, default_codec
from events.kafka_log import KafkaEventLog, to_log_record
from events.keys import ConversationKey
from events.producer import ConversationProducer
from pgstore.event_index import INDEX_COLUMNS
from pgstore.migrate import migrate
from pgstore.pool import open_pool
from pgstore.store import PostgresProjectionStore
from pgstore.versions import ProjectionVersion, create_version
from projectors.changes import TranscriptRow
from projectors.fold import BatchInputs, decode_batch, fold_batch
from projectors.gc_tuning import projection_gc
from projectors.log_source import LogSource
from projectors.row_values import countable_text
from projectors.rows import TRANSCRIPT_COLUMNS, column_list, index_rows, transcript_copy_rows
from projectors.runner import Projector
from projectors.tokens import TokenCounter, text_counter
from projectors.window import WindowPolicy

TEXT = "提交之后审批流程是怎样的？外包员工需要驻场负责人先确认，再由直属主管和供应商管理员审批。"
SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


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


async def postgres_cpu_s(pool: AsyncConnectionPool[Any]) -> float:
    """CPU seconds the Postgres backends of ``pool``'s application name have used so far (their
    /proc stat; 0 when Postgres runs elsewhere): the server's side of a step, which the wall
    clock of a shared machine cannot tell apart from waiting for a core."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = current_setting('application_name')"
        )
        pids = [pid for (pid,) in await cur.fetchall()]
        await conn.commit()
    return _processes_cpu_s(pids)


def _processes_cpu_s(pids: Sequence[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return total


async def raw_consume(bootstrap: str, topic: str, n: int) -> tuple[float, float, list[object]]:
    """(wall seconds, CPU seconds, the records) of reading the topic with a bare consumer."""
    # read_committed like every convlog reader: the ceiling does the same work
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, isolation_level="read_committed"
    )
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in range(12)]
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    records: list[object] = []
    started, cpu = time.perf_counter(), time.process_time()
    while len(records) < n:
        batches = await consumer.getmany(timeout_ms=1000, max_records=2000)
        for messages in batches.values():
            records.extend(messages)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    await consumer.stop()
    return elapsed, cpu, records


def fastavro_decode_s(raw_records: Sequence[Any]) -> float:
    """Seconds fastavro takes to read every record's body with the current schema: the decode
    no reader of the log can skip (no validation, no event objects)."""
    newest = max(SCHEMAS.glob("event.v*.avsc"), key=lambda p: int(p.name.split(".")[1][1:]))
    schema = parse_schema(json.loads(newest.read_text(encoding="utf-8")))
    values = [r.value for r in raw_records]
    started = time.perf_counter()
    for value in values:
        schemaless_reader(io.BytesIO(value[HEADER_SIZE:]), schema, None)
    return time.perf_counter() - started


def o200k_count_s(rows: Sequence[TranscriptRow]) -> float:
    """Seconds of one ``o200k_base`` count per message text (uncached, as tiktoken counts)."""
    count = text_counter("o200k_base")
    texts = [countable_text(r) for r in rows]
    started = time.perf_counter()
    for text in texts:
        count(text)
    return time.perf_counter() - started


def transcript_rows(raw_records: Sequence[object]) -> tuple[list[TranscriptRow], float]:
    """The transcript rows the projector writes for these aiokafka records, and the seconds the
    pure core took to decode, validate and fold them (one core, no I/O)."""
    records = [to_log_record(r) for r in raw_records]
    started = time.perf_counter()
    decoded = decode_batch(records, codec=default_codec(), max_event_bytes=1 << 20)
    transcript = fold_batch(decoded, BatchInputs({}), policy=WindowPolicy()).transcript
    return transcript, time.perf_counter() - started


def token_counting_s(rows: Sequence[TranscriptRow], counter: TokenCounter) -> float:
    """Seconds tiktoken takes for the rows' counts, every encoding the projector counts."""
    texts = [countable_text(r) for r in rows]
    reasoning = [r.reasoning_content or "" for r in rows]
    started = time.perf_counter()
    for encoding in counter.encodings:
        counter.count_many(texts, encoding)
        counter.count_many(reasoning, encoding)
    return time.perf_counter() - started


@dataclass(frozen=True, slots=True)
class Ceiling:
    """The necessary-work ceiling of N records: each unskippable step's seconds, timed alone."""

    events: int
    consume_s: float
    decode_s: float
    count_s: float
    copy_s: float
    raw_copy_s: float  # the old baseline's COPY: transcript only, into an unindexed copy
    cpu_s: float  # CPU seconds of the four steps: this process's, and Postgres' for the COPY

    @property
    def cpu_rate(self) -> float:
        return self.events / self.cpu_s

    @property
    def rate(self) -> float:
        return self.events / (self.consume_s + self.decode_s + self.count_s + self.copy_s)

    @property
    def raw_rate(self) -> float:
        return self.events / (self.consume_s + self.raw_copy_s)

    def parts(self) -> dict[str, float]:
        return {
            "raw consume": self.consume_s,
            "fastavro decode": self.decode_s,
            "one o200k_base count": self.count_s,
            "indexed COPY": self.copy_s,
        }

    def print(self) -> None:
        n = self.events
        print(f"raw aiokafka consume        {n / self.consume_s:>10,.0f} events/s  ({self.consume_s:.2f} s)")
        print(f"fastavro decode             {n / self.decode_s:>10,.0f} events/s  ({self.decode_s:.2f} s)")
        print(f"one o200k_base count        {n / self.count_s:>10,.0f} texts/s   ({self.count_s:.2f} s)")
        print(f"COPY, 3 tables, indexed     {n / self.copy_s:>10,.0f} events/s  ({self.copy_s:.2f} s)")
        print(f"necessary-work ceiling      {self.rate:>10,.0f} events/s")
        print(f"(old raw consume + raw COPY {self.raw_rate:>10,.0f} events/s)")


async def necessary_work(
    pool: AsyncConnectionPool[Any], raw_records: Sequence[Any], consume_s: float, consume_cpu_s: float
) -> Ceiling:
    """The ceiling of ``raw_records`` (read in ``consume_s``): decode, count and COPY timed alone;
    the rows COPYed are the projector's own, computed beforehand (untimed)."""
    records = [to_log_record(r) for r in raw_records]
    decoded = decode_batch(records, codec=default_codec(), max_event_bytes=1 << 20)
    out = fold_batch(decoded, BatchInputs({}), policy=WindowPolicy())
    rows = transcript_copy_rows(out.transcript, TokenCounter())
    tables: list[tuple[str, Sequence[str], Sequence[tuple[Any, ...]]]] = [
        ("transcript", TRANSCRIPT_COLUMNS, rows),
        ("event_ids", ("conversation_key", "event_id"), out.applied_event_ids),
        ("event_index", INDEX_COLUMNS, index_rows(decoded)),
    ]
    cpu = time.process_time()
    decode_s = fastavro_decode_s(raw_records)
    count_s = o200k_count_s(out.transcript)
    cpu_s = consume_cpu_s + time.process_time() - cpu
    version, raw_copy_s = await raw_copy(pool, rows)
    cpu, server = time.process_time(), await postgres_cpu_s(pool)
    copy_s = await indexed_copy(pool, version, tables)
    cpu_s += time.process_time() - cpu + await postgres_cpu_s(pool) - server
    return Ceiling(len(raw_records), consume_s, decode_s, count_s, copy_s, raw_copy_s, cpu_s)


async def indexed_copy(
    pool: AsyncConnectionPool[Any],
    version: ProjectionVersion,
    tables: Sequence[tuple[str, Sequence[str], Sequence[tuple[Any, ...]]]],
) -> float:
    """Seconds to COPY ``tables``' rows into ``version``'s own (indexed) tables, one transaction;
    the version's tables are emptied again afterwards (untimed)."""
    async with pool.connection() as conn:
        started = time.perf_counter()
        async with conn.cursor() as cur:
            for table, columns, rows in tables:
                statement = sql.SQL("COPY {}.{} ({}) FROM STDIN").format(
                    sql.Identifier(version.schema), sql.Identifier(table), sql.SQL(column_list(columns))
                )
                async with cur.copy(statement) as copy:
                    for row in rows:
                        await copy.write_row(row)
        await conn.commit()
        elapsed = time.perf_counter() - started
        for table, _, _ in tables:
            await conn.execute(sql.SQL("TRUNCATE {}.{}").format(sql.Identifier(version.schema), sql.Identifier(table)))
        await conn.commit()
    return elapsed


def print_cpu_budget(n: int, parts: dict[str, float], measured: tuple[str, float] | None = None) -> None:
    """What each step costs per event, measured alone on one core, and — for a measured run —
    what it spent per event beyond the sum of those steps."""
    print("cost per event, each measured alone:")
    for name, seconds in parts.items():
        print(f"  {name:<26}{seconds / n * 1e6:>8.1f} us")
    necessary = sum(parts.values()) / n * 1e6
    print(f"  {'sum (the ceiling)':<26}{necessary:>8.1f} us")
    if measured is not None:
        name, seconds = measured
        spent = seconds / n * 1e6
        print(f"  {name:<26}{spent:>8.1f} us  ({spent - necessary:+.1f} us beyond the ceiling's steps)")


def print_table(rows: Sequence[tuple[str, str, str, bool | None]]) -> None:
    """The bench's figures as one markdown table (docs/performance.md is built from it)."""
    print()
    print("| figure | value | target | met |")
    print("|---|---|---|---|")
    for figure, value, target, met in rows:
        print(f"| {figure} | {value} | {target} | {'' if met is None else 'yes' if met else 'no'} |")


async def raw_copy(pool: AsyncConnectionPool[Any], rows: Sequence[tuple[Any, ...]]) -> tuple[ProjectionVersion, float]:
    """COPY ``rows`` into a scratch table shaped like a new version's transcript, without its
    indexes (the old raw baseline): (the new version, seconds)."""
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

    consume_s, consume_cpu_s, raw_records = await raw_consume(bootstrap, topic, args.events)
    ceiling = await necessary_work(pool, raw_records, consume_s, consume_cpu_s)
    transcript, core_s = transcript_rows(raw_records)
    tokens_s = token_counting_s(transcript, counter)
    del raw_records, transcript
    async with pool.connection() as conn:
        version = await create_version(conn)

    log = await KafkaEventLog.connect(bootstrap=bootstrap, topic=topic, partitions=12)
    store = PostgresProjectionStore(
        pool,
        schema=version.schema,
        codec=default_codec(),
        counter=counter,
        policy=WindowPolicy(),
        max_event_bytes=1 << 20,
    )
    projector = Projector(LogSource(log), store, batch_size=args.batch_size, fetch_timeout_s=0.2)
    until = await log.end_offsets()
    cpu, server = time.process_time(), await postgres_cpu_s(pool)
    started = time.perf_counter()
    with projection_gc():  # as `convlog project` and `convlog serve` run their projector
        await projector.run(asyncio.Event(), until=until)
    project_s = time.perf_counter() - started
    project_cpu_s = time.process_time() - cpu + await postgres_cpu_s(pool) - server
    await log.close()
    await pool.close()

    n = args.events
    rate = n / project_s
    ceiling.print()
    print(f"convlog projector           {rate:>10,.0f} events/s  ({project_s:.2f} s, batch {args.batch_size})")
    print(f"ratio projector / ceiling   {rate / ceiling.rate:>10.2f}   (target >= 0.50)")
    print("the projector's own steps, measured alone:")
    print(f"  decode+validate+fold      {core_s / n * 1e6:>8.1f} us/event")
    print(f"  token counting ({len(counter.encodings)} enc.)   {tokens_s / n * 1e6:>8.1f} us/event")
    print_cpu_budget(n, ceiling.parts(), ("convlog projector", project_s))
    cpu_rate = n / project_cpu_s
    print(
        f"CPU per event (this process + its Postgres backends): ceiling {1e6 / ceiling.cpu_rate:.1f} us, "
        f"projector {1e6 / cpu_rate:.1f} us"
    )
    print_table(
        [
            ("necessary-work ceiling", f"{ceiling.rate:,.0f} events/s", "", None),
            ("convlog projector", f"{rate:,.0f} events/s", "", None),
            ("projector / ceiling", f"{rate / ceiling.rate:.2f}", ">= 0.50", rate / ceiling.rate >= 0.5),
            ("CPU per event: ceiling / projector (Python + Postgres)", f"{cpu_rate / ceiling.cpu_rate:.2f}", "", None),
            ("projector / old raw baseline (consume + unindexed COPY)", f"{rate / ceiling.raw_rate:.2f}", "", None),
        ]
    )


if __name__ == "__main__":
    asyncio.run(main())
