"""Producer API throughput next to raw aiokafka, measured in the same run.

Both sides send the same events to fresh topics with the same producer settings (acks=all,
idempotence, linger, explicit murmur2 partition) and the same concurrency shape: W workers,
each appending its share one after another and waiting for the acknowledgement — how chat
apps call ``append``. The convlog side also validates and Avro-encodes every event; the raw
side sends bytes encoded beforehand. A pipelined raw run (every send in flight at once) is
printed as the ceiling of the broker/client pair.

    CONVLOG_KAFKA_BOOTSTRAP=127.0.0.1:19092 python bench/produce.py [--events N] [--workers W]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from datetime import UTC, datetime

from aiokafka import AIOKafkaProducer

from events.codec import default_codec
from events.event_types import Event, MessageAppended
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey, partition_for_key
from events.producer import EVENT_TYPE_HEADER, ConversationProducer

TEXT = "提交之后审批流程是怎样的？外包员工需要驻场负责人先确认，再由直属主管和供应商管理员审批。" * 3


def make_events(n: int, conversations: int) -> list[Event]:
    now = datetime.now(UTC)
    return [
        Event(
            event_id=str(uuid.uuid4()),
            key=ConversationKey("bench", f"user-{i % 97}", f"conv-{i % conversations}"),
            occurred_at=now,
            producer="bench",
            body=MessageAppended(message_id=f"m{i}", role="user" if i % 2 == 0 else "assistant", content=TEXT),
        )
        for i in range(n)
    ]


async def run_convlog(bootstrap: str, events: list[Event], workers: int, partitions: int) -> float:
    log = await KafkaEventLog.connect(
        bootstrap=bootstrap, topic=f"bench.api.{uuid.uuid4().hex[:8]}", partitions=partitions
    )
    producer = ConversationProducer(log, producer="bench")
    await producer.append(events[0].key, events[0].body)  # warm up metadata and the connection

    async def worker(share: list[Event]) -> None:
        for e in share:
            await producer.append(e.key, e.body, event_id=e.event_id, occurred_at=e.occurred_at)

    started = time.perf_counter()
    await asyncio.gather(*(worker(events[w::workers]) for w in range(workers)))
    elapsed = time.perf_counter() - started
    await log.close()
    return len(events) / elapsed


async def _raw_producer(bootstrap: str) -> tuple[AIOKafkaProducer, str, int]:
    log = await KafkaEventLog.connect(
        bootstrap=bootstrap, topic=f"bench.raw.{uuid.uuid4().hex[:8]}", partitions=12
    )  # creates the topic the same way
    topic, partitions = log.topic, log.partition_count
    await log.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=2,
        max_request_size=2 * 1024 * 1024,
        max_batch_size=2 * 1024 * 1024,  # as events.kafka_log sets it (an append_many batch fits)
        request_timeout_ms=30000,
    )
    await producer.start()
    await producer.send_and_wait(topic, b"warm-up", key=b"w", partition=0)
    return producer, topic, partitions


async def run_raw(bootstrap: str, encoded: list[tuple[bytes, bytes, bytes]], workers: int) -> float:
    producer, topic, partitions = await _raw_producer(bootstrap)

    async def worker(share: list[tuple[bytes, bytes, bytes]]) -> None:
        for key, value, event_type in share:
            await producer.send_and_wait(
                topic,
                value,
                key=key,
                partition=partition_for_key(key, partitions),
                headers=[(EVENT_TYPE_HEADER, event_type)],
            )

    started = time.perf_counter()
    await asyncio.gather(*(worker(encoded[w::workers]) for w in range(workers)))
    elapsed = time.perf_counter() - started
    await producer.stop()
    return len(encoded) / elapsed


async def run_raw_pipelined(bootstrap: str, encoded: list[tuple[bytes, bytes, bytes]]) -> float:
    producer, topic, partitions = await _raw_producer(bootstrap)
    started = time.perf_counter()
    futures = [
        await producer.send(
            topic,
            value,
            key=key,
            partition=partition_for_key(key, partitions),
            headers=[(EVENT_TYPE_HEADER, event_type)],
        )
        for key, value, event_type in encoded
    ]
    await asyncio.gather(*futures)
    elapsed = time.perf_counter() - started
    await producer.stop()
    return len(encoded) / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000, help="events per run")
    parser.add_argument("--workers", type=int, default=256)
    parser.add_argument("--conversations", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5, help="paired raw/convlog runs after a warm-up pair")
    args = parser.parse_args()
    bootstrap = os.environ.get("CONVLOG_KAFKA_BOOTSTRAP")
    if not bootstrap:
        raise SystemExit(
            "set CONVLOG_KAFKA_BOOTSTRAP: make services-up, then eval the output of"
            " `python -m convlog.local.devservices env`"
        )
    events = make_events(args.events, args.conversations)
    codec = default_codec()
    encoded = [(e.key.encode(), codec.encode(e), e.event_type.encode()) for e in events]
    size = sum(len(v) for _, v, _ in encoded) / len(encoded)
    print(
        f"{args.events} events of ~{size:.0f} bytes per run, {args.conversations} conversations, "
        f"{args.workers} concurrent appenders, acks=all, idempotent, linger_ms=2"
    )
    # The broker shares this machine's cores and warms up (JIT) as it goes: a discarded warm-up
    # pair first, then paired runs in alternating order; the median of the pairs' ratios.
    await run_raw(bootstrap, encoded, args.workers)
    await run_convlog(bootstrap, events, args.workers, 12)
    raws, apis, ratios = [], [], []
    for i in range(args.rounds):
        if i % 2 == 0:
            raw = await run_raw(bootstrap, encoded, args.workers)
            api = await run_convlog(bootstrap, events, args.workers, 12)
        else:
            api = await run_convlog(bootstrap, events, args.workers, 12)
            raw = await run_raw(bootstrap, encoded, args.workers)
        raws.append(raw)
        apis.append(api)
        ratios.append(api / raw)
        print(f"  run {i + 1}: raw {raw:>9,.0f}/s  convlog {api:>9,.0f}/s  ratio {api / raw:.2f}")
    ceiling = await run_raw_pipelined(bootstrap, encoded)
    print(f"raw aiokafka (same shape)     {statistics.median(raws):>10,.0f} events/s (median)")
    print(f"convlog producer API          {statistics.median(apis):>10,.0f} events/s (median)")
    ratio = statistics.median(ratios)
    print(f"ratio convlog / raw           {ratio:>10.2f}   (median of pairs; target >= 0.60)")
    print(f"raw aiokafka, all in flight   {ceiling:>10,.0f} events/s   (for reference)")


if __name__ == "__main__":
    asyncio.run(main())
