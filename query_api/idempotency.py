"""Idempotency-Key on message appends: the same key and body answer the first append again; the
same key with another body is refused — across restarts and API instances, not only here.

The key is the event id, and the projections keep the first event of a conversation with an
id. So the answer to a repeated key is the first record of the conversation that carried it,
found — in this order — in a bounded in-process memory of recent appends, in the event index
of the read models (then read from the log, the source of truth, and compared), or in the part
of the log the projection has not reached yet (scanned: the cost of the lag). Bodies are
compared as events, without ``occurred_at`` (the time of each request).

Two requests with one key: in one process they queue on a lock per (conversation, key), so the
second waits for the first's answer. In two processes both may find nothing and both append;
the log orders them, so after appending each one looks at what was appended between its own
look-up and its record — the earlier record wins, the later answers as its repeat (or 409), and
the projections ignore the later record (its event id is taken).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from events.codec import EventCodec, default_codec
from events.errors import ConvlogError, DecodeError
from events.event_types import Event
from events.keys import ConversationKey, partition_for_key
from events.log import Coordinates, EventLog, LogRecord
from events.producer import Appended, ConversationProducer, appended_at
from events.reading import conversation_events
from query_api.log_reads import indexed_events, read_range
from query_api.ports import ReadModels

REMEMBERED_KEYS = 10_000  # recent appends answered without Postgres or the log
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_Slot = tuple[str, str]  # (conversation key, event id)


class IdempotencyKeyReusedError(ConvlogError):
    """The key was used before, for another body: nothing was appended (or, after a race with
    another instance, the record appended is one every projection ignores)."""

    code = "idempotency_key_reused"

    def __init__(self, first: Appended) -> None:
        super().__init__(
            f"Idempotency-Key {first.event_id!r} was used for another body (partition {first.partition}, "
            f"offset {first.offset}); use a new key for a new message"
        )
        self.first = first


@dataclasses.dataclass(frozen=True, slots=True)
class _First:
    """The first append with a key: what it answered and a digest of its event."""

    digest: bytes
    appended: Appended


def event_digest(event: Event) -> bytes:
    """A digest of the event's content: everything but ``occurred_at``, maps in key order."""
    doc = dataclasses.asdict(dataclasses.replace(event, occurred_at=_EPOCH))
    text = json.dumps(doc, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).digest()


class _SlotLocks:
    """One lock per slot in use; a slot's lock goes away with its last holder."""

    def __init__(self) -> None:
        self._locks: dict[_Slot, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, slot: _Slot) -> AsyncIterator[None]:
        lock, users = self._locks.get(slot, (asyncio.Lock(), 0))
        self._locks[slot] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[slot]
            if users == 1:
                del self._locks[slot]
            else:
                self._locks[slot] = (lock, users - 1)


class IdempotentAppends:
    def __init__(
        self,
        producer: ConversationProducer,
        log: EventLog,
        reads: Callable[[], Awaitable[ReadModels]],
        *,
        codec: EventCodec | None = None,
        remembered: int = REMEMBERED_KEYS,
    ) -> None:
        self._producer, self._log, self._reads = producer, log, reads
        self._codec = codec or default_codec()
        self._limit = remembered
        self._recent: OrderedDict[_Slot, _First] = OrderedDict()
        self._locks = _SlotLocks()

    async def append_message(self, key: ConversationKey, message: Mapping[str, Any], *, event_id: str) -> Appended:
        """Append the message under ``event_id`` unless the key was used: then the first
        append's answer, or :class:`IdempotencyKeyReusedError` for another body."""
        event, data = self._producer.build_message(key, message, event_id=event_id)
        mine = event_digest(self._codec.decode(data))  # as it will read back from the log
        slot = (str(key), event.event_id)
        async with self._locks.hold(slot):
            first = self._recent.get(slot)
            checked_end = 0
            if first is None:
                first, checked_end = await self._look_up(key, event.event_id)
            if first is None:
                appended = await self._producer.append_built(event, data)
                first = await self._earlier(key, event.event_id, checked_end, appended.coordinates)
                first = first or _First(mine, appended)
            self._remember(slot, first)
        if first.digest != mine:
            raise IdempotencyKeyReusedError(first.appended)
        return first.appended

    def _remember(self, slot: _Slot, first: _First) -> None:
        self._recent[slot] = first
        self._recent.move_to_end(slot)
        while len(self._recent) > self._limit:
            self._recent.popitem(last=False)

    def _first(self, record: LogRecord, event: Event) -> _First:
        return _First(event_digest(event), appended_at(event, record.coordinates))

    async def _look_up(self, key: ConversationKey, event_id: str) -> tuple[_First | None, int]:
        """The first record with ``event_id``, and the log end up to which it was looked for."""
        partition = partition_for_key(key.encode(), self._log.partition_count)
        at = await (await self._reads()).logged_at(key, partition, event_id=event_id)
        if at.offsets:  # projected: read that record back from the log and compare with it
            for record, event in await indexed_events(self._log, key, at, codec=self._codec):
                if event.event_id == event_id:
                    return self._first(record, event), 0
        end = (await self._log.end_offsets())[partition]
        # A record this build cannot decode carries no event id it could match: passed over.
        tail = conversation_events(self._log, key, start_offset=at.projected, codec=self._codec, skip_undecodable=True)
        async for record, event in tail:
            if event.event_id == event_id:  # appended, not projected yet
                return self._first(record, event), 0
        return None, end

    async def _earlier(self, key: ConversationKey, event_id: str, start: int, mine: Coordinates) -> _First | None:
        """A record with ``event_id`` another instance appended between the look-up (which saw
        the log up to ``start``) and this one's record at ``mine``."""
        if mine.offset <= start:
            return None
        raw = key.encode()
        for record in await read_range(self._log, mine.partition, start, mine.offset - 1):
            if record.key == raw:
                try:
                    event = self._codec.decode(record.value)
                except DecodeError:
                    continue  # carries no event id it could match
                if event.event_id == event_id:
                    return self._first(record, event)
        return None
