"""Reading one conversation's events back from the log (demo, CLI, replays, the API's audit reads)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from events.codec import EventCodec, default_codec
from events.errors import DecodeError, LogUnavailableError, UndecodableRecordError
from events.event_types import Event
from events.keys import ConversationKey, partition_for_key
from events.log import EventLog, LogRecord


async def conversation_events(
    log: EventLog,
    key: ConversationKey,
    *,
    start_offset: int = 0,
    codec: EventCodec | None = None,
    batch_size: int = 1000,
    stall_timeout_s: float = 30.0,
    skip_undecodable: bool = False,
) -> AsyncIterator[tuple[LogRecord, Event]]:
    """The conversation's events from ``start_offset`` up to the log's end at call time.

    Only the conversation's own partition is read; records of other conversations sharing
    it are skipped by key without being decoded. The end is reached by the read position,
    which moves past offsets that hold no record (a transactional producer's commit and abort
    markers) — a partition whose last offset is a marker ends too. A read that makes no
    progress for ``stall_timeout_s`` raises :class:`LogUnavailableError` (retriable).
    """
    codec = codec or default_codec()
    raw_key = key.encode()
    partition = partition_for_key(raw_key, log.partition_count)
    end = (await log.end_offsets([partition]))[partition]
    position = start_offset
    progressed_at = time.monotonic()
    while position < end:
        batch = await log.read({partition: position}, max_records=batch_size, timeout_s=1.0)
        for record in batch.records:
            if record.offset >= end:
                return
            if record.key == raw_key:
                try:
                    event = decode_logged(record, codec)
                except UndecodableRecordError:
                    if skip_undecodable:
                        continue
                    raise
                yield record, event
        moved = batch.positions.get(partition, position)
        if moved > position:
            position, progressed_at = moved, time.monotonic()
        elif time.monotonic() - progressed_at > stall_timeout_s:
            raise LogUnavailableError(
                f"reading partition {partition} made no progress at offset {position} for {stall_timeout_s:g}s "
                f"(its end is {end}): the log does not answer"
            )


def decode_logged(record: LogRecord, codec: EventCodec) -> Event:
    """The event of a record read back from the log; :class:`UndecodableRecordError` (with its
    coordinates) when this build cannot decode it — a foreign record the projection dead-lettered."""
    try:
        return codec.decode(record.value)
    except DecodeError as e:
        raise UndecodableRecordError(record.partition, record.offset, e) from e
