"""Idempotency-Key on message appends: the same key and body answer the first append again; the
same key with another body is refused — across restarts and API instances, not only here.

The key is the event id, and the projections keep the first event of a conversation with an
id. So the answer to a repeated key is the first record of the conversation that carried it,
found — in this order — in a bounded in-process memory of recent appends, in the event index
of the read models (then read from the log, the source of truth, and compared), or in the part
of the log the projection has not reached yet (scanned: the cost of the lag). Bodies are
compared as events, without ``occurred_at`` (the time of each request).

A payload of several messages (one batch, see :mod:`events.batches`) is looked up by its
first event id; the first append's records are that record and the ones after it (a batch is
contiguous), compared as a whole: the same payload again answers every message's first
coordinates and appends nothing; anything else under that key is a 409. A payload whose ids
derive from its provider id (no key given) goes through here too, so a response appended
twice is appended once.

After an erase of the conversation, or a redaction of a message the key's append carried, a
repeated key is 409 ``idempotency_key_erased`` whatever the body (read from the log, so across
restarts and instances too): answering 202 for the right body and 409 for another would let
anyone with the tenant's token confirm a guess of the erased content.

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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from events.batches import NativeBatch
from events.codec import EventCodec, default_codec
from events.errors import ConvlogError, DecodeError
from events.event_types import ConversationErased, Event, MessageRedacted
from events.keys import ConversationKey, partition_for_key
from events.log import Coordinates, EventLog, LogRecord
from events.producer import Appended, ConversationProducer, appended_at
from events.reading import conversation_events
from query_api.key_refresh import decoded_fresh
from query_api.log_reads import conversation_records, indexed_events, read_range
from query_api.ports import ReadModels

REMEMBERED_KEYS = 10_000  # recent appends answered without Postgres or the log
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_Slot = tuple[str, str]  # (conversation key, event id)
_Count = tuple[int, str | None]  # a batch's size, and the event id one more message would have had


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


class IdempotencyKeyErasedError(IdempotencyKeyReusedError):
    """The key's first append was erased (or a message of it redacted) since: whether this body
    is the one it carried is not told, or the key would confirm a guess of erased content."""

    code = "idempotency_key_erased"

    def __init__(self, first: Appended) -> None:
        ConvlogError.__init__(
            self,
            f"Idempotency-Key {first.event_id!r} was used by a message since erased or redacted (partition "
            f"{first.partition}, offset {first.offset}); whether this body is the same is not told; use a new key",
        )
        self.first = first


@dataclasses.dataclass(frozen=True, slots=True)
class _First:
    """The first append with a key: what it answered (per message) and a digest of its events."""

    digest: bytes
    appended: tuple[Appended, ...]


def event_digest(event: Event) -> bytes:
    """A digest of the event's content: everything but ``occurred_at``, maps in key order."""
    doc = dataclasses.asdict(dataclasses.replace(event, occurred_at=_EPOCH))
    text = json.dumps(doc, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).digest()


def batch_digest(events: Sequence[Event]) -> bytes:
    """:func:`event_digest` of one event; of several, a digest of theirs in order."""
    if len(events) == 1:
        return event_digest(events[0])
    return hashlib.sha256(b"".join(event_digest(e) for e in events)).digest()


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
        batch = NativeBatch(((event, data),), deterministic=True, next_event_id=f"{event.event_id}/1")
        return (await self.append_batch(key, batch))[0]

    async def append_batch(
        self, key: ConversationKey, batch: NativeBatch, *, before_append: Callable[[], Awaitable[None]] | None = None
    ) -> list[Appended]:
        """Append the batch unless its first event id was used: then the first append's answer
        (every message's), or :class:`IdempotencyKeyReusedError` for another payload.
        ``before_append`` runs only when the batch is about to be appended (a check that a
        repeat, already stored, need not pass again); it refuses by raising."""
        mine = batch_digest([self._codec.decode(data) for _, data in batch.built])  # as they will read back
        count, event_id = (len(batch.built), batch.next_event_id), batch.built[0][0].event_id
        slot = (str(key), event_id)
        async with self._locks.hold(slot):
            first = self._recent.get(slot)
            checked_end = 0
            if first is None:
                first, checked_end = await self._look_up(key, event_id, count)
            if first is None:
                if before_append is not None:
                    await before_append()
                appended = await self._producer.append_batch(batch)
                first = await self._earlier(key, event_id, checked_end, appended[0].coordinates, count)
                first = first or _First(mine, tuple(appended))
            elif await self._erased_since(key, first):
                raise IdempotencyKeyErasedError(first.appended[0])  # whatever the body: no oracle
            self._remember(slot, first)
        if first.digest != mine:
            raise IdempotencyKeyReusedError(first.appended[0])
        return list(first.appended)

    async def _erased_since(self, key: ConversationKey, first: _First) -> bool:
        """Whether the conversation was erased after the first append, or a message of it
        redacted: read from the log (the source of truth, ahead of the read models), from that
        append on — a retry soon after it reads little. Any erase counts, a conditional one too."""
        messages = {a.message_id for a in first.appended if a.message_id is not None}
        reads = await self._reads()
        for _, event in await conversation_records(
            self._log, reads, key, codec=self._codec, after=first.appended[-1].offset, skip_undecodable=True
        ):
            body = event.body
            if isinstance(body, ConversationErased):
                return True
            if isinstance(body, MessageRedacted) and body.message_id in messages:
                return True
        return False

    def _remember(self, slot: _Slot, first: _First) -> None:
        self._recent[slot] = first
        self._recent.move_to_end(slot)
        while len(self._recent) > self._limit:
            self._recent.popitem(last=False)

    async def _first(self, record: LogRecord, event: Event, count: _Count) -> _First:
        """The first append: ``record`` and the records of its batch after it (a batch is
        contiguous), as many as this one has — and one more when that one carries the id a
        longer payload's next message has, so that a prefix of a stored batch does not match."""
        (n, next_id), p = count, record.partition
        pairs = [(record, event)]
        last = min(record.offset + n, (await self._log.end_offsets([p]))[p] - 1)
        rest = await read_range(self._log, p, record.offset + 1, last) if last > record.offset else []
        for i, r in enumerate(rest, start=1):
            try:
                following = await decoded_fresh(self._codec, r.value)
            except DecodeError:
                break  # no batch of ours holds it: the digests differ
            if i < n or (r.key == record.key and following.event_id == next_id):
                pairs.append((r, following))
        events = [e for _, e in pairs]
        return _First(batch_digest(events), tuple(appended_at(e, r.coordinates) for r, e in pairs[:n]))

    async def _look_up(self, key: ConversationKey, event_id: str, count: _Count) -> tuple[_First | None, int]:
        """The first record with ``event_id``, and the log end up to which it was looked for."""
        partition = partition_for_key(key.encode(), self._log.partition_count)
        at = await (await self._reads()).logged_at(key, partition, event_id=event_id)
        # Ids are clear: records are matched unopened, and only the match is opened — with the
        # key store refreshed if another instance sealed it under a key this one has not loaded.
        unopened = self._codec.without_keys()
        if at.offsets:  # projected: read that record back from the log and compare with it
            for record, event in await indexed_events(self._log, key, at, codec=unopened):
                if event.event_id == event_id:
                    return await self._first(record, await decoded_fresh(self._codec, record.value), count), 0
        end = (await self._log.end_offsets([partition]))[partition]
        # A record this build cannot decode carries no event id it could match: passed over.
        tail = conversation_events(self._log, key, start_offset=at.projected, codec=unopened, skip_undecodable=True)
        async for record, event in tail:
            if event.event_id == event_id:  # appended, not projected yet
                return await self._first(record, await decoded_fresh(self._codec, record.value), count), 0
        return None, end

    async def _earlier(
        self, key: ConversationKey, event_id: str, start: int, mine: Coordinates, count: _Count
    ) -> _First | None:
        """A record with ``event_id`` another instance appended between the look-up (which saw
        the log up to ``start``) and this one's record at ``mine``."""
        if mine.offset <= start:
            return None
        raw = key.encode()
        for record in await read_range(self._log, mine.partition, start, mine.offset - 1):
            if record.key == raw:
                try:
                    event = self._codec.without_keys().decode(record.value)
                except DecodeError:
                    continue  # carries no event id it could match
                if event.event_id == event_id:
                    return await self._first(record, await decoded_fresh(self._codec, record.value), count)
        return None
