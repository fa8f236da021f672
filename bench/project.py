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

Sealing (issue 25, on by default): with ``--sealing both`` (the default) all of it runs twice,
plain records then sealed ones (written by the producer API with a key store; the projector
opens them with the same keys and stores sealed rows). For sealed records the ceiling adds the
steps the design cannot skip, each timed alone with cryptography's ``AESGCM`` (one object per
key, made beforehand): decrypting each record's ciphertext, reading the plaintext body
(fastavro), and encrypting each row's content columns for Postgres (the read models hold
content only sealed: docs/erasure.md). The COPY is of the sealed rows the projector writes.

    CONVLOG_KAFKA_BOOTSTRAP=... CONVLOG_DATABASE_URL=... python bench/project.py [--events N] [--sealing both|on|off]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
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
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from fastavro import parse_schema, schemaless_reader
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from events.codec import HEADER_SIZE, EventCodec, default_codec
from events.kafka_log import KafkaEventLog, to_log_record
from events.keys import ConversationKey
from events.log import LogRecord
from events.producer import ConversationProducer
from events.sealing.envelope import record_associated_data
from events.sealing.key_store import SubjectKeyStore
from events.sealing.keys import DataKey
from events.sealing.local_kek import LocalMasterKey
from events.sealing.memory_keys import MemoryKeyRecordLog
from events.sealing.ports import KeyRing, KeyStore
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
from projectors.sealed_rows import RowSealer, row_ad
from projectors.tokens import TokenCounter, text_counter
from projectors.window import WindowPolicy

TEXT = "提交之后审批流程是怎样的？外包员工需要驻场负责人先确认，再由直属主管和供应商管理员审批。"
SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def keyed_codec(keys: KeyRing | None) -> EventCodec:
    """The codec that opens sealed records with ``keys`` (as convlog.resources makes it)."""
    return default_codec() if keys is None else default_codec().with_keys(keys)


def services_from_env() -> tuple[str, str]:
    """(Kafka bootstrap, Postgres URL) as `make services-up` / `devservices env` give them."""
    bootstrap, url = os.environ.get("CONVLOG_KAFKA_BOOTSTRAP"), os.environ.get("CONVLOG_DATABASE_URL")
    if not bootstrap or not url:
        raise SystemExit("set CONVLOG_KAFKA_BOOTSTRAP and CONVLOG_DATABASE_URL (make services-up)")
    return bootstrap, url


async def fresh_topic(bootstrap: str, bench: str, events: int, conversations: int, keys: KeyStore | None = None) -> str:
    """A new topic holding ``events`` message events over ``conversations`` (written untimed),
    sealed under ``keys`` when given."""
    topic = f"bench.{bench}.{uuid.uuid4().hex[:8]}"
    print(f"writing {events} {'sealed' if keys else 'plain'} events over {conversations} conversations to {topic} ...")
    await write_events(bootstrap, topic, events, conversations, keys)
    return topic


async def memory_key_store() -> SubjectKeyStore:
    """A key store with its records in memory and a fresh master key (the bench's own)."""
    kek = LocalMasterKey.from_setting(base64.b64encode(os.urandom(32)).decode())
    return await SubjectKeyStore.open(MemoryKeyRecordLog(), kek)


async def write_events(bootstrap: str, topic: str, n: int, conversations: int, keys: KeyStore | None = None) -> None:
    log = await KafkaEventLog.connect(bootstrap=bootstrap, topic=topic, partitions=12)
    producer = ConversationProducer(log, producer="bench", keys=keys)

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


def body_schema(name: str) -> Any:
    """The newest schema's ``name`` record (``MessageAppended``) alone, parsed for fastavro: what
    a seal's plaintext is (events.codec.EventCodec.encode_body), its named types inlined."""
    newest = max(SCHEMAS.glob("event.v*.avsc"), key=lambda p: int(p.name.split(".")[1][1:]))
    named: dict[str, Any] = {}
    parse_schema(json.loads(newest.read_text(encoding="utf-8")), named_schemas=named)
    seen: set[str] = set()

    def inline(schema: Any) -> Any:
        if isinstance(schema, str):
            return inline(named[schema]) if schema in named and schema not in seen else schema
        if isinstance(schema, list):
            return [inline(s) for s in schema]
        if not isinstance(schema, dict):
            return schema
        if schema.get("name") in named:
            seen.add(schema["name"])
        out = dict(schema)
        if "fields" in schema:
            out["fields"] = [{**f, "type": inline(f["type"])} for f in schema["fields"]]
        for k in ("items", "values"):
            if k in schema:
                out[k] = inline(schema[k])
        return out

    return parse_schema(inline(f"convlog.events.{name}"))


def sealed_crypto_s(records: Sequence[LogRecord], rows: Sequence[tuple[Any, ...]], keys: KeyRing) -> float:
    """Seconds of what sealed records add to the ceiling, each with cryptography's ``AESGCM``
    made once per key beforehand: decrypting every record's ciphertext, reading its plaintext
    body with fastavro, and encrypting every sealed row's content columns (their packed
    plaintext, as the projector stores it). Everything else is prepared untimed."""
    codec, aeads = default_codec(), dict[str, AESGCM]()

    def aead(key_id: str) -> AESGCM:
        key = keys.lookup(key_id)
        assert isinstance(key, DataKey)
        return aeads.setdefault(key_id, AESGCM(key.secret))

    opens = []
    for record in records:
        event = codec.decode_unopened(record.value)
        seal = getattr(event.body, "sealed", None)
        assert seal is not None
        ad = record_associated_data(str(event.key), event.event_id, event.event_type, seal.key_id)
        opens.append((aead(seal.key_id), seal.nonce, seal.ciphertext, ad))
    plaintexts = [a.decrypt(nonce, ct, ad) for a, nonce, ct, ad in opens]
    seals = []
    for row in rows:  # conversation_key, seq, partition, offset, event_id, ..., sealed, key_id
        sealed, key_id = row[-2], row[-1]
        ad = row_ad(row[0], "transcript", row[4], key_id)
        packed = aead(key_id).decrypt(sealed[:12], sealed[12:], ad)
        seals.append((aead(key_id), sealed[:12], packed, ad))
    schema = body_schema("MessageAppended")
    started = time.perf_counter()
    for a, nonce, ct, ad in opens:
        a.decrypt(nonce, ct, ad)
    for plaintext in plaintexts:
        schemaless_reader(io.BytesIO(plaintext), schema, None)
    for a, nonce, packed, ad in seals:
        a.encrypt(nonce, packed, ad)
    return time.perf_counter() - started


def o200k_count_s(rows: Sequence[TranscriptRow]) -> float:
    """Seconds of one ``o200k_base`` count per message text (uncached, as tiktoken counts)."""
    count = text_counter("o200k_base")
    texts = [countable_text(r) for r in rows]
    started = time.perf_counter()
    for text in texts:
        count(text)
    return time.perf_counter() - started


def transcript_rows(raw_records: Sequence[object], keys: KeyRing | None) -> tuple[list[TranscriptRow], float]:
    """The transcript rows the projector writes for these aiokafka records, and the seconds the
    pure core took to decode (and open), validate and fold them (one core, no I/O)."""
    records = [to_log_record(r) for r in raw_records]
    started = time.perf_counter()
    decoded = decode_batch(records, codec=keyed_codec(keys), max_event_bytes=1 << 20)
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
    cpu_s: float  # CPU seconds of the steps: this process's, and Postgres' for the COPY
    crypto_s: float = 0.0  # sealed records: AES-GCM open, plaintext read, row seal (sealed_crypto_s)

    @property
    def cpu_rate(self) -> float:
        return self.events / self.cpu_s

    @property
    def rate(self) -> float:
        return self.events / (self.consume_s + self.decode_s + self.count_s + self.copy_s + self.crypto_s)

    @property
    def raw_rate(self) -> float:
        return self.events / (self.consume_s + self.raw_copy_s)

    def parts(self) -> dict[str, float]:
        return {
            "raw consume": self.consume_s,
            "fastavro decode": self.decode_s,
            "one o200k_base count": self.count_s,
            "indexed COPY": self.copy_s,
        } | ({"AES-GCM open + body read + row seal": self.crypto_s} if self.crypto_s else {})

    def print(self) -> None:
        n = self.events
        print(f"raw aiokafka consume        {n / self.consume_s:>10,.0f} events/s  ({self.consume_s:.2f} s)")
        print(f"fastavro decode             {n / self.decode_s:>10,.0f} events/s  ({self.decode_s:.2f} s)")
        print(f"one o200k_base count        {n / self.count_s:>10,.0f} texts/s   ({self.count_s:.2f} s)")
        print(f"COPY, 3 tables, indexed     {n / self.copy_s:>10,.0f} events/s  ({self.copy_s:.2f} s)")
        if self.crypto_s:
            print(f"AES-GCM open, read, seal    {n / self.crypto_s:>10,.0f} events/s  ({self.crypto_s:.2f} s)")
        print(f"necessary-work ceiling      {self.rate:>10,.0f} events/s")
        print(f"(old raw consume + raw COPY {self.raw_rate:>10,.0f} events/s)")


async def necessary_work(
    pool: AsyncConnectionPool[Any],
    raw_records: Sequence[Any],
    consume: tuple[float, float],
    keys: KeyRing | None,
) -> Ceiling:
    """The ceiling of ``raw_records`` (read in ``consume``: wall and CPU seconds): decode, count,
    COPY and (sealed records, ``keys``) the crypto timed alone; the rows COPYed are the
    projector's own, computed beforehand (untimed)."""
    consume_s, consume_cpu_s = consume
    records = [to_log_record(r) for r in raw_records]
    decoded = decode_batch(records, codec=keyed_codec(keys), max_event_bytes=1 << 20)
    out = fold_batch(decoded, BatchInputs({}), policy=WindowPolicy())
    rows = transcript_copy_rows(out.transcript, TokenCounter(), None if keys is None else RowSealer(keys))
    tables: list[tuple[str, Sequence[str], Sequence[tuple[Any, ...]]]] = [
        ("transcript", TRANSCRIPT_COLUMNS, rows),
        ("event_ids", ("conversation_key", "event_id"), out.applied_event_ids),
        ("event_index", INDEX_COLUMNS, index_rows(decoded)),
    ]
    cpu = time.process_time()
    decode_s = fastavro_decode_s(raw_records)
    count_s = o200k_count_s(out.transcript)
    crypto_s = 0.0 if keys is None else sealed_crypto_s(records, rows, keys)
    cpu_s = consume_cpu_s + time.process_time() - cpu
    version, raw_copy_s = await raw_copy(pool, rows)
    cpu, server = time.process_time(), await postgres_cpu_s(pool)
    copy_s = await indexed_copy(pool, version, tables)
    cpu_s += time.process_time() - cpu + await postgres_cpu_s(pool) - server
    return Ceiling(len(raw_records), consume_s, decode_s, count_s, copy_s, raw_copy_s, cpu_s, crypto_s)


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


@dataclass(frozen=True, slots=True)
class Measured:
    """One mode's run: the ceiling, the projector's wall seconds and CPU (with Postgres')."""

    ceiling: Ceiling
    project_s: float
    project_cpu_s: float

    @property
    def rate(self) -> float:
        return self.ceiling.events / self.project_s


async def measure(bootstrap: str, url: str, args: argparse.Namespace, keys: KeyStore | None) -> Measured:
    """The ceiling and the projector of a fresh topic, its records sealed under ``keys`` if given."""
    topic = await fresh_topic(bootstrap, "project", args.events, args.conversations, keys)
    pool = await open_pool(url, name="bench")
    counter = TokenCounter()

    consume_s, consume_cpu_s, raw_records = await raw_consume(bootstrap, topic, args.events)
    ceiling = await necessary_work(pool, raw_records, (consume_s, consume_cpu_s), keys)
    transcript, core_s = transcript_rows(raw_records, keys)
    tokens_s = token_counting_s(transcript, counter)
    del raw_records, transcript
    async with pool.connection() as conn:
        version = await create_version(conn)

    log = await KafkaEventLog.connect(bootstrap=bootstrap, topic=topic, partitions=12)
    store = PostgresProjectionStore(
        pool,
        schema=version.schema,
        codec=keyed_codec(keys),
        counter=counter,
        policy=WindowPolicy(),
        max_event_bytes=1 << 20,
        keys=keys,
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
    print(f"-- sealing {'on' if keys else 'off'}")
    ceiling.print()
    print(f"convlog projector           {rate:>10,.0f} events/s  ({project_s:.2f} s, batch {args.batch_size})")
    print(f"ratio projector / ceiling   {rate / ceiling.rate:>10.2f}   (target >= 0.50)")
    print("the projector's own steps, measured alone:")
    print(f"  decode+validate+fold      {core_s / n * 1e6:>8.1f} us/event")
    print(f"  token counting ({len(counter.encodings)} enc.)   {tokens_s / n * 1e6:>8.1f} us/event")
    print_cpu_budget(n, ceiling.parts(), ("convlog projector", project_s))
    print(
        f"CPU per event (this process + its Postgres backends): ceiling {1e6 / ceiling.cpu_rate:.1f} us, "
        f"projector {project_cpu_s / n * 1e6:.1f} us"
    )
    return Measured(ceiling, project_s, project_cpu_s)


def mode_rows(m: Measured, mode: str) -> list[tuple[str, str, str, bool | None]]:
    ceiling, rate, cpu_rate = m.ceiling, m.rate, m.ceiling.events / m.project_cpu_s
    return [
        (f"{mode}: necessary-work ceiling", f"{ceiling.rate:,.0f} events/s", "", None),
        (f"{mode}: convlog projector", f"{rate:,.0f} events/s", "", None),
        (f"{mode}: projector / ceiling", f"{rate / ceiling.rate:.2f}", ">= 0.50", rate / ceiling.rate >= 0.5),
        (
            f"{mode}: CPU per event: ceiling / projector (Python + Postgres)",
            f"{cpu_rate / ceiling.cpu_rate:.2f}",
            "",
            None,
        ),
        (
            f"{mode}: projector / old raw baseline (consume + unindexed COPY)",
            f"{rate / ceiling.raw_rate:.2f}",
            "",
            None,
        ),
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=2000)
    parser.add_argument("--sealing", choices=("both", "on", "off"), default="both")
    args = parser.parse_args()
    bootstrap, url = services_from_env()
    await migrate(url)
    runs: dict[str, Measured] = {}
    for mode in ("plain", "sealed"):
        if args.sealing == "both" or (args.sealing == "on") == (mode == "sealed"):
            runs[mode] = await measure(bootstrap, url, args, await memory_key_store() if mode == "sealed" else None)
    rows = [row for mode, m in runs.items() for row in mode_rows(m, mode)]
    if len(runs) == 2:
        plain, sealed = runs["plain"], runs["sealed"]
        n = args.events
        rows += [
            ("sealed projector / plain projector (events/s)", f"{sealed.rate / plain.rate:.2f}", "", None),
            (
                "CPU sealing adds an event, projector (Python + Postgres)",
                f"{(sealed.project_cpu_s - plain.project_cpu_s) / n * 1e6:+.1f} µs",
                "",
                None,
            ),
            (
                "of which the ceiling's crypto (AES-GCM open, body read, row seal)",
                f"{sealed.ceiling.crypto_s / n * 1e6:.1f} µs",
                "",
                None,
            ),
        ]
    print_table(rows)


if __name__ == "__main__":
    asyncio.run(main())
