"""Producer API throughput next to raw aiokafka, measured in the same run.

Both sides send the same events to fresh topics with the same producer settings (acks=all,
idempotence, linger, explicit murmur2 partition) and the same concurrency shape: W workers,
each appending its share one after another and waiting for the acknowledgement — how chat
apps call ``append``. The convlog side also validates and Avro-encodes every event; the raw
side sends bytes encoded beforehand. A pipelined raw run (every send in flight at once) is
printed as the ceiling of the broker/client pair.

Fairness. The machine is shared (the broker runs on it too, and whatever else does), so what
one side measures depends on when it ran: the two sides take turns, many times, in short runs
(``--events`` each) of alternating order, with both producers connected all along, and the
figure is the median of the pairs' ratios. Before the first run every partition of both topics
has taken a record — a fresh topic's partitions take a moment to have a leader, and a send
refused meanwhile (NotLeaderForPartition) is retried 100 ms later, which landed inside timed
runs when each run had a fresh topic warmed on one partition. The prepared events are frozen out
of the garbage collector's view and each run starts after a collection, so neither side pays for
the other's garbage or for the bench's own data. Each run also reports this process's CPU time
per event, which the machine's load moves far less than the throughput.

Sealing (issue 25, on by default in a deployment): with ``--sealing both`` (the default) each
round runs a third side, the producer API sealing every event under its conversation's data
key (``events/sealing/``; the key store's records in memory: a conversation's key is created
once, in the warm-up run, and every timed append finds it in this process, as a deployment's
appends do), and each API side's ratio is taken against the same round's raw run.
``--sealing on`` or ``off`` runs only one API side.

    CONVLOG_KAFKA_BOOTSTRAP=127.0.0.1:19092 python bench/produce.py [--events N] [--rounds R] [--workers W]
        [--sealing both|on|off]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import os
import statistics
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaProducer
from table import Row, print_table

from events.codec import default_codec
from events.event_types import Event, EventBody, MessageAppended
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey, partition_for_key
from events.producer import EVENT_TYPE_HEADER, ConversationProducer
from events.sealing.key_store import SubjectKeyStore
from events.sealing.local_kek import LocalMasterKey
from events.sealing.memory_keys import MemoryKeyRecordLog
from events.sealing.ports import KeyStore

TEXT = "提交之后审批流程是怎样的？外包员工需要驻场负责人先确认，再由直属主管和供应商管理员审批。" * 3


def make_events(n: int, conversations: int) -> list[Event]:
    now = datetime.now(UTC)
    return [
        Event(
            event_id=str(uuid.uuid4()),
            # conversation c belongs to one user: `conversations` keys in all (97 users x 500
            # conversation ids made 10,000 distinct keys of 10,000 events, one event each)
            key=ConversationKey("bench", f"user-{i % conversations % 97}", f"conv-{i % conversations}"),
            occurred_at=now,
            producer="bench",
            body=MessageAppended(message_id=f"m{i}", role="user" if i % 2 == 0 else "assistant", content=TEXT),
        )
        for i in range(n)
    ]


PARTITIONS = 12
RAW_SETTINGS: dict[str, Any] = {
    "acks": "all",
    "enable_idempotence": True,
    "linger_ms": 2,
    "max_request_size": 2 * 1024 * 1024,
    "max_batch_size": 2 * 1024 * 1024,  # as events.kafka_log sets it (an append_many batch fits)
    "request_timeout_ms": 30000,
}


def _warm_keys(partitions: int) -> list[ConversationKey]:
    """One conversation key per partition, to warm every partition through the API."""
    keys: dict[int, ConversationKey] = {}
    i = 0
    while len(keys) < partitions:
        key = ConversationKey("bench", "warm-up", f"conv-{i}")
        keys.setdefault(partition_for_key(key.encode(), partitions), key)
        i += 1
    return list(keys.values())


@dataclass(frozen=True)
class Run:
    rate: float  # events/s
    cpu_us: float  # this process's CPU time per event: the client's own cost, whatever the broker does


async def _timed(workers: list[Coroutine[Any, Any, None]], count: int) -> Run:
    gc.collect()  # this run starts without the garbage of the one before
    cpu, started = time.process_time(), time.perf_counter()
    await asyncio.gather(*workers)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return Run(count / elapsed, cpu / count * 1e6)


class ConvlogSide:
    """The producer API on its own topic, connected once for the whole bench."""

    def __init__(self, log: KafkaEventLog, keys: KeyStore | None) -> None:
        self._log = log
        self._producer = ConversationProducer(log, producer="bench", keys=keys)

    @classmethod
    async def connect(cls, bootstrap: str, topic: str, body: EventBody, *, sealing: bool = False) -> ConvlogSide:
        """``sealing``: every event sealed under its conversation's key (an in-memory key store)."""
        keys = None
        if sealing:
            kek = LocalMasterKey.from_setting(base64.b64encode(os.urandom(32)).decode())
            keys = await SubjectKeyStore.open(MemoryKeyRecordLog(), kek)
        log = await KafkaEventLog.connect(bootstrap=bootstrap, topic=topic, partitions=PARTITIONS)
        side = cls(log, keys)
        # Every partition has a leader and the connection is up before any clock starts.
        await asyncio.gather(*(side._producer.append(key, body) for key in _warm_keys(log.partition_count)))
        return side

    async def run(self, events: list[Event], workers: int) -> Run:
        producer = self._producer

        async def worker(share: list[Event]) -> None:
            for e in share:
                await producer.append(e.key, e.body, event_id=e.event_id, occurred_at=e.occurred_at)

        return await _timed([worker(events[w::workers]) for w in range(workers)], len(events))

    async def close(self) -> None:
        await self._log.close()


class RawSide:
    """aiokafka with the producer API's settings on its own topic, connected once."""

    def __init__(self, producer: AIOKafkaProducer, topic: str) -> None:
        self._producer = producer
        self._topic = topic

    @classmethod
    async def connect(cls, bootstrap: str, topic: str) -> RawSide:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **RAW_SETTINGS)
        await producer.start()
        await asyncio.gather(
            *(producer.send_and_wait(topic, b"warm-up", key=b"w", partition=p) for p in range(PARTITIONS))
        )
        return cls(producer, topic)

    async def run(self, encoded: list[tuple[bytes, bytes, bytes]], workers: int) -> Run:
        producer, topic = self._producer, self._topic

        async def worker(share: list[tuple[bytes, bytes, bytes]]) -> None:
            for key, value, event_type in share:
                await producer.send_and_wait(
                    topic,
                    value,
                    key=key,
                    partition=partition_for_key(key, PARTITIONS),
                    headers=[(EVENT_TYPE_HEADER, event_type)],
                )

        return await _timed([worker(encoded[w::workers]) for w in range(workers)], len(encoded))

    async def run_pipelined(self, encoded: list[tuple[bytes, bytes, bytes]]) -> float:
        producer, topic = self._producer, self._topic
        gc.collect()
        started = time.perf_counter()
        futures = [
            await producer.send(
                topic,
                value,
                key=key,
                partition=partition_for_key(key, PARTITIONS),
                headers=[(EVENT_TYPE_HEADER, event_type)],
            )
            for key, value, event_type in encoded
        ]
        await asyncio.gather(*futures)
        return len(encoded) / (time.perf_counter() - started)

    async def close(self) -> None:
        await self._producer.stop()


async def _topic(bootstrap: str, side: str) -> str:
    """A fresh topic, made the way the producer API makes its own."""
    log = await KafkaEventLog.connect(
        bootstrap=bootstrap, topic=f"bench.{side}.{uuid.uuid4().hex[:8]}", partitions=PARTITIONS
    )
    await log.close()
    return log.topic


def _summary(runs: list[Run]) -> str:
    rate, cpu = statistics.median(r.rate for r in runs), statistics.median(r.cpu_us for r in runs)
    return f"{rate:,.0f} events/s, {cpu:.1f} µs of client CPU an event"


def _median_us(runs: list[Run]) -> float:
    return statistics.median(r.cpu_us for r in runs)


@dataclass
class ApiRuns:
    """One producer-API side's runs, and its ratio to the raw run of the same round."""

    name: str
    side: ConvlogSide
    runs: list[Run]
    ratios: list[float]

    def rows(self, raws: list[Run]) -> list[Row]:
        ratio = statistics.median(self.ratios)
        quartiles = statistics.quantiles(self.ratios, n=4) if len(self.ratios) > 1 else [ratio, ratio, ratio]
        return [
            Row(f"convlog producer API, {self.name} (median)", _summary(self.runs)),
            Row(
                f"ratio convlog {self.name} / raw (median of {len(self.ratios)} pairs)",
                f"{ratio:.2f} (middle half {quartiles[0]:.2f}–{quartiles[2]:.2f})",
                ">= 0.60",
                ratio >= 0.6,
            ),
            Row(
                f"client CPU an event, raw / convlog {self.name} (medians)",
                f"{_median_us(raws) / _median_us(self.runs):.2f}",
            ),
        ]


async def _round(
    i: int, raw_side: RawSide, apis: list[ApiRuns], events: list[Event], encoded: list[Any], *, workers: int
) -> Run:
    """One round: the raw side and every API side, in an order that rotates with ``i``."""
    order: list[ApiRuns | None] = [None, *apis]
    shift = i % len(order)
    order = order[shift:] + order[:shift]
    raw: Run | None = None
    runs: dict[str, Run] = {}
    for side in order if i % 2 == 0 else reversed(order):
        if side is None:
            raw = await raw_side.run(encoded, workers)
        else:
            runs[side.name] = await side.side.run(events, workers)
    assert raw is not None
    line = f"  run {i + 1}: raw {raw.rate:>9,.0f}/s ({raw.cpu_us:4.1f} µs CPU/event)"
    for api in apis:
        run = runs[api.name]
        api.runs.append(run)
        api.ratios.append(run.rate / raw.rate)
        line += f"  {api.name} {run.rate:>9,.0f}/s ({run.cpu_us:4.1f} µs) ratio {api.ratios[-1]:.2f}"
    print(line)
    return raw


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=5_000, help="events per run")
    parser.add_argument("--workers", type=int, default=256)
    parser.add_argument("--conversations", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=15, help="paired raw/convlog runs after a warm-up pair")
    parser.add_argument("--sealing", choices=("both", "on", "off"), default="both", help="which API sides run")
    args = parser.parse_args()
    bootstrap = os.environ.get("CONVLOG_KAFKA_BOOTSTRAP")
    if not bootstrap:
        raise SystemExit(
            "set CONVLOG_KAFKA_BOOTSTRAP: make services-up, then eval the output of `python -m devservices env`"
        )
    events = make_events(args.events, args.conversations)
    codec = default_codec()
    encoded = [(e.key.encode(), codec.encode(e), e.event_type.encode()) for e in events]
    gc.collect()
    gc.freeze()  # the prepared events are the bench's, not the producer's: no collection walks them
    size = sum(len(v) for _, v, _ in encoded) / len(encoded)
    print(
        f"{args.events} events of ~{size:.0f} bytes per run, {args.conversations} conversations, "
        f"{args.workers} concurrent appenders, acks=all, idempotent, linger_ms=2"
    )
    raw_side = await RawSide.connect(bootstrap, await _topic(bootstrap, "raw"))
    apis = [
        ApiRuns(
            name,
            await ConvlogSide.connect(bootstrap, await _topic(bootstrap, name), events[0].body, sealing=on),
            [],
            [],
        )
        for name, on in (("plain", False), ("sealed", True))
        if args.sealing == "both" or (args.sealing == "on") == on
    ]
    # The broker warms up (JIT) as it goes, and the sealed side makes its keys: a discarded warm-up round first.
    await raw_side.run(encoded, args.workers)
    for api in apis:
        await api.side.run(events, args.workers)
    raws = [await _round(i, raw_side, apis, events, encoded, workers=args.workers) for i in range(args.rounds)]
    ceiling = await raw_side.run_pipelined(encoded)
    for api in apis:
        await api.side.close()
    await raw_side.close()
    rows = [Row("raw aiokafka, same shape (median)", _summary(raws))]
    for api in apis:
        rows += api.rows(raws)
    if len(apis) == 2:
        added = _median_us(apis[1].runs) - _median_us(apis[0].runs)
        rows.append(Row("client CPU sealing adds an event (medians, sealed - plain)", f"{added:+.1f} µs"))
    rows.append(Row("raw aiokafka, all in flight (the ceiling)", f"{ceiling:,.0f} events/s"))
    print_table("Producer API next to raw aiokafka (bench/produce.py)", rows)


if __name__ == "__main__":
    asyncio.run(main())
