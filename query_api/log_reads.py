"""One conversation read back from the log at the cost of the conversation, not of its partition.

The event index (pgstore/event_index.py) holds the coordinates of every record the
projection has passed; those records are fetched from the log by offset, in coalesced ranges,
and only what lies beyond the projection's position is scanned. The log stays the source of
truth: the records are the log's own bytes, decoded here, so folding them gives what folding a
scan of the partition gives (erasure and redaction are applied by the readers, as before).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from events.codec import EventCodec, default_codec
from events.errors import DecodeError, LogUnavailableError, UndecodableRecordError
from events.event_types import Event
from events.keys import ConversationKey, partition_for_key
from events.log import EventLog, LogRecord
from events.reading import conversation_events, decode_logged
from query_api.key_refresh import refreshing_keys
from query_api.ports import LoggedAt, ReadModels

# Records of other conversations read through rather than given a fetch of their own: a fetch
# returns a whole batch from the broker anyway, so a short detour costs less than a round trip.
MAX_GAP = 32
_READ_BATCH = 1000
_EMPTY_READS = 10  # a record the index names exists: this many empty polls in a row is an outage


def coalesce(offsets: Sequence[int], *, max_gap: int = MAX_GAP) -> list[tuple[int, int]]:
    """Ascending offsets as inclusive ranges, joining neighbours at most ``max_gap`` apart."""
    ranges: list[tuple[int, int]] = []
    for offset in offsets:
        if ranges and offset - ranges[-1][1] <= max_gap + 1:
            ranges[-1] = (ranges[-1][0], offset)
        else:
            ranges.append((offset, offset))
    return ranges


async def read_range(log: EventLog, partition: int, first: int, last: int) -> list[LogRecord]:
    """The records of ``partition`` at offsets ``first``..``last``; a record at ``last`` or after
    it must exist (offsets need not be dense, so the range ends where a record passes it)."""
    out: list[LogRecord] = []
    position, empty = first, 0
    while position <= last:
        batch = await log.read({partition: position}, max_records=min(last - position + 1, _READ_BATCH))
        records = batch.records
        if not records:
            empty += 1
            if empty >= _EMPTY_READS:
                raise LogUnavailableError(f"partition {partition} returned nothing at offset {position}")
            continue
        empty = 0
        out.extend(r for r in records if r.offset <= last)
        position = max(records[-1].offset + 1, batch.positions.get(partition, 0))
    return out


async def read_offsets(
    log: EventLog, partition: int, offsets: Sequence[int], *, max_gap: int = MAX_GAP
) -> list[LogRecord]:
    """The records at exactly ``offsets`` (ascending, all existing) of ``partition``."""
    wanted = set(offsets)
    out: list[LogRecord] = []
    for first, last in coalesce(offsets, max_gap=max_gap):
        out.extend(r for r in await read_range(log, partition, first, last) if r.offset in wanted)
    return out


async def conversation_records(
    log: EventLog,
    reads: ReadModels,
    key: ConversationKey,
    *,
    codec: EventCodec | None = None,
    after: int = -1,
    skip_undecodable: bool = False,
) -> list[tuple[LogRecord, Event]]:
    """Every event of the conversation in the log (with ``after``, past that offset), in log
    order (empty: the log has none). A record this build cannot decode raises
    :class:`~events.errors.UndecodableRecordError`, or is passed over with ``skip_undecodable``;
    one sealed under a key this process has not loaded yet is read again once the key store is
    refreshed (query_api/key_refresh.py)."""
    keyed = codec or default_codec()
    return await refreshing_keys(
        keyed,
        lambda: _conversation_records(log, reads, key, codec=keyed, after=after, skip_undecodable=skip_undecodable),
    )


async def _conversation_records(
    log: EventLog,
    reads: ReadModels,
    key: ConversationKey,
    *,
    codec: EventCodec,
    after: int,
    skip_undecodable: bool,
) -> list[tuple[LogRecord, Event]]:
    partition = partition_for_key(key.encode(), log.partition_count)
    at = await reads.logged_at(key, partition)
    if not at.indexed:  # a version older than the index: scan, from the conversation's first event
        start = max(at.first_offset or 0, after + 1)
        return [
            pair
            async for pair in conversation_events(
                log, key, start_offset=start, codec=codec, skip_undecodable=skip_undecodable
            )
        ]
    at = replace(at, offsets=tuple(o for o in at.offsets if o > after), projected=max(at.projected, after + 1))
    tail = conversation_events(log, key, start_offset=at.projected, codec=codec, skip_undecodable=skip_undecodable)
    indexed = await indexed_events(log, key, at, codec=codec, skip_undecodable=skip_undecodable)
    return [*indexed, *[pair async for pair in tail]]


async def indexed_events(
    log: EventLog, key: ConversationKey, at: LoggedAt, *, codec: EventCodec, skip_undecodable: bool = False
) -> list[tuple[LogRecord, Event]]:
    """The events at ``at.offsets``; only records with the conversation's own key bytes count,
    exactly as a scan of the partition would match them."""
    raw = key.encode()
    records = await read_offsets(log, at.partition, at.offsets)
    out: list[tuple[LogRecord, Event]] = []
    for r in records:
        if r.key == raw:
            try:
                out.append((r, decode_logged(r, codec)))
            except UndecodableRecordError:
                if not skip_undecodable:
                    raise
    return out


async def log_holds(log: EventLog, reads: ReadModels, key: ConversationKey) -> bool:
    """Whether the log holds any record of the conversation — decided from the log where the
    read models have not caught up: never refuses a conversation that exists, and (the key
    names the tenant) never finds another tenant's."""
    partition = partition_for_key(key.encode(), log.partition_count)
    at = await reads.logged_at(key, partition)
    if at.first_offset is not None or at.offsets:
        return True
    try:
        async for _ in conversation_events(log, key, start_offset=at.projected):
            return True
    except DecodeError:  # a record of the conversation that cannot be decoded is still its record
        return True
    return False
