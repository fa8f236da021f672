"""Reading one conversation's events back from the log (demo, CLI, replays)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from events.codec import EventCodec, default_codec
from events.keys import ConversationKey, partition_for_key
from events.log import EventLog, LogRecord
from events.model import Event


async def conversation_events(
    log: EventLog,
    key: ConversationKey,
    *,
    start_offset: int = 0,
    codec: EventCodec | None = None,
    batch_size: int = 1000,
) -> AsyncIterator[tuple[LogRecord, Event]]:
    """The conversation's events from ``start_offset`` up to the log's end at call time.

    Only the conversation's own partition is read; records of other conversations sharing
    it are skipped by key without being decoded.
    """
    codec = codec or default_codec()
    raw_key = key.encode()
    partition = partition_for_key(raw_key, log.partition_count)
    end = (await log.end_offsets())[partition]
    position = start_offset
    while position < end:
        records = await log.read({partition: position}, max_records=batch_size, timeout_s=1.0)
        if not records:
            continue
        for record in records:
            if record.offset >= end:
                return
            if record.key == raw_key:
                yield record, codec.decode(record.value)
        position = records[-1].offset + 1
