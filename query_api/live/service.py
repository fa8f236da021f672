"""The query service: what the API reads, without HTTP — the live context (read-your-writes with
``min_offset``), the context as served then (rebuilt from the log), a conversation's events from
the log, and the read models caught up with the log for an append's orphan check. It raises
domain errors (query_api/live/errors.py, query_api/as_of.py); the HTTP API maps them."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from events.codec import EventCodec, default_codec
from events.event_types import Event
from events.keys import ConversationKey, partition_for_key
from events.log import EventLog, LogRecord
from projectors.positions_watch import PositionsWatch
from projectors.tokens import DEFAULT_COUNTED
from projectors.window import WindowPolicy
from query_api.as_of import BeforeMessage, PolicyAt
from query_api.cache_prefix import PrefixMemory
from query_api.context_types import NO_EDITING, Context, ContextRequest, EditingPolicy, ModelSpec
from query_api.key_refresh import refreshing_keys
from query_api.live.errors import (
    ConversationNotFoundError,
    ConversationParkedError,
    NotCaughtUpError,
    UnknownVersionError,
)
from query_api.live.ranges import RowsNeeded, assemble_live
from query_api.live.wait import held, reflects, wait_for_projection
from query_api.log_reads import conversation_records, log_holds
from query_api.metrics import Metrics
from query_api.ports import ContextInputs, ReadModels
from query_api.served import context_as_of

T = TypeVar("T")


class Guard(Protocol):
    """Runs a read of the log on the caller's terms (the HTTP API: only while its client is
    connected, query_api/http/disconnects.py)."""

    def __call__(self, work: Awaitable[T], /) -> Awaitable[T]: ...


def unguarded(work: Awaitable[T]) -> Awaitable[T]:
    return work


@dataclass(frozen=True)
class ServedContext:
    """A context and the inputs it came from; for a live one, the read-models ``version`` it was
    read from and its ``cacheable_prefix`` (leading tokens equal to the previous one served for
    the conversation, encoding and model: None when none is known here)."""

    context: Context
    inputs: ContextInputs
    version: int | None = None
    cacheable_prefix: int | None = None


@dataclass
class QueryService:
    """The reads, the log, the projection's commits and the settings the reads need."""

    log: EventLog
    reads: Callable[[], Awaitable[ReadModels]]  # the live version's reads (it changes on a switch)
    metrics: Metrics
    default_encoding: str = "o200k_base"
    counted_encodings: tuple[str, ...] = DEFAULT_COUNTED  # what the projector stores counts of; others: at read
    image_turns: int = 2
    editing: EditingPolicy = NO_EDITING  # the context editing a request gets unless it says otherwise
    wait_for_offset_s: float = 5.0
    policy: WindowPolicy = field(default_factory=WindowPolicy)  # as-of rebuilds', unless policy_at is given
    policy_at: PolicyAt | None = None  # the window of the version that served a context as of an event
    # The window of a numbered read-models version (None: it never was live), for an audit that
    # names the version a context said it was served by (Convlog-Read-Models-Version).
    version_policy: Callable[[int], Awaitable[WindowPolicy | None]] | None = None
    max_event_bytes: int = 1024 * 1024
    log_behind: Callable[[int], None] | None = None  # raises for a partition whose records the log lost
    prefixes: PrefixMemory = field(default_factory=PrefixMemory)  # the last context served, for its cacheable prefix
    positions: PositionsWatch | None = None  # the projector's commits, when it runs in this process; else polling
    rows_needed: RowsNeeded = field(default_factory=RowsNeeded)  # how many rows a long range's next read takes
    # What log reads decode with: with the key store's keys, sealed records open (events/sealing/).
    codec: EventCodec = field(default_factory=default_codec)

    def partition_of(self, key: ConversationKey) -> int:
        return partition_for_key(key.encode(), self.log.partition_count)

    async def held_by_log(self, key: ConversationKey) -> None:
        """:class:`ConversationNotFoundError` unless the log holds the conversation (the read
        models may lag behind it)."""
        if not await log_holds(self.log, await self.reads(), key):
            raise ConversationNotFoundError("no such conversation")

    async def logged_events(self, key: ConversationKey) -> list[tuple[LogRecord, Event]]:
        """The conversation's events, read from the log through the event index;
        :class:`ConversationNotFoundError` for none."""
        reads = await self.reads()
        pairs = await refreshing_keys(self.codec, lambda: conversation_records(self.log, reads, key, codec=self.codec))
        if not pairs:
            raise ConversationNotFoundError("no such conversation")
        return pairs

    async def reads_past_log_end(self, key: ConversationKey) -> ReadModels:
        """The live version's reads once the projection reached the end of the conversation's
        partition as of now (bounded, like ``min_offset``): what is open in them then is what
        the log holds. :class:`NotCaughtUpError` when it did not."""
        reads = await self.reads()
        partition = self.partition_of(key)
        end = (await self.log.end_offsets([partition]))[partition]
        try:
            await wait_for_projection(
                reads, self.log, partition, end - 1, timeout_s=self.wait_for_offset_s, watch=self.positions, field=None
            )
        except NotCaughtUpError as e:
            raise NotCaughtUpError(
                "the read models have not caught up with the log, so the tool calls this payload "
                "answers cannot be checked yet",
                partition=partition,
            ) from e
        return reads

    async def live_context(
        self, key: ConversationKey, spec: ModelSpec, request: ContextRequest, min_offset: int | None = None
    ) -> ServedContext:
        """The live context; with ``min_offset``, once the read models hold it (read-your-writes).
        Counted as served, with the prefix it shares with the one served before it."""
        ctx, inputs, reads = await refreshing_keys(self.codec, lambda: self._read_live(key, spec, request, min_offset))
        self.metrics.context_served(ctx.token_count)
        prefix = self.prefixes.served((str(key), request.format, request.model), ctx.units)
        if prefix is not None:
            self.metrics.cacheable_prefix(request.format, prefix=prefix, tokens=sum(tokens for _, tokens in ctx.units))
        return ServedContext(ctx, inputs, reads.version, prefix)

    async def _read_live(
        self, key: ConversationKey, spec: ModelSpec, request: ContextRequest, min_offset: int | None
    ) -> tuple[Context, ContextInputs, ReadModels]:
        """The live context, and the reads it came from. The projector's commit is taken as a
        hint and confirmed by the context read itself (:func:`reflects`); only when that read
        does not show it does the wait ask the read models' positions, and read again. A wait
        follows a switch of the live version made meanwhile (its positions, then its context),
        never waits out a retired one's."""
        reads = await self.reads()
        if min_offset is None:
            return *await assemble_live(reads, key, spec, request, self.rows_needed), reads
        partition = self.partition_of(key)
        if self.log_behind is not None:  # never confirm an offset the projection did not take from this log
            self.log_behind(partition)
        waited = time.perf_counter()
        hinted = await wait_for_projection(
            reads,
            self.log,
            partition,
            min_offset,
            timeout_s=self.wait_for_offset_s,
            watch=self.positions,
            trust_hint=True,
            follow=self.reads,
        )
        self.metrics.freshness(time.perf_counter() - waited)
        reads = await self.reads()
        try:
            ctx, inputs = await assemble_live(reads, key, spec, request, self.rows_needed)
            if not hinted or reflects(inputs, partition, min_offset):
                return (*await _unless_parked(reads, key, partition, min_offset, (ctx, inputs)), reads)
        except ConversationNotFoundError:
            if not hinted:
                raise  # (after a hint: not even the conversation is in these read models yet)
        # The hint is not in these read models (another version's commit, or an offset of another
        # conversation): wait for the read models' own word, then read again.
        await wait_for_projection(
            reads,
            self.log,
            partition,
            min_offset,
            timeout_s=self.wait_for_offset_s,
            watch=self.positions,
            follow=self.reads,
        )
        reads = await self.reads()
        ctx, inputs = await assemble_live(reads, key, spec, request, self.rows_needed)
        return (*await _unless_parked(reads, key, partition, min_offset, (ctx, inputs)), reads)

    async def context_then(
        self,
        key: ConversationKey,
        spec: ModelSpec,
        request: ContextRequest,
        point: int | BeforeMessage,
        *,
        version: int | None = None,
        guard: Guard = unguarded,
    ) -> ServedContext:
        """The context as served at offset ``point`` / before message ``point``, rebuilt from the
        log (its reads run under ``guard``); with ``version``, as read-models version ``version``
        served it (:class:`UnknownVersionError` for one that never served contexts)."""
        policy: WindowPolicy | PolicyAt | None
        if version is not None:
            policy = None if self.version_policy is None else await self.version_policy(version)
            if policy is None:
                raise UnknownVersionError(version)
        else:
            # The window of the version that served it: live when the context's last event was projected.
            policy = self.policy if self.policy_at is None else self.policy_at
        pairs = await guard(self.logged_events(key))
        if isinstance(point, int):  # the rule min_offset has: never a context "after" an event the log does not hold
            await held(self.log, self.partition_of(key), point, "as_of")
        served = await guard(
            context_as_of(
                self.log,
                key,
                point,
                request=request,
                spec=spec,
                policy=policy,
                max_event_bytes=self.max_event_bytes,
                start_offset=pairs[0][0].offset,
                pairs=pairs,
                codec=self.codec,
            )
        )
        if served is None:
            at = f"offset {point}" if isinstance(point, int) else f"message {point.message_id!r}"
            raise ConversationNotFoundError(f"the conversation had no event before {at}")
        self.metrics.context_served(served[0].token_count)
        return ServedContext(*served)


async def _unless_parked(
    reads: ReadModels, key: ConversationKey, partition: int, min_offset: int, read: tuple[Context, ContextInputs]
) -> tuple[Context, ContextInputs]:
    """Read-your-writes on a parked conversation: its records from the dead letter's on are
    held, so a context asked to reflect ``min_offset`` at or past it would miss acknowledged
    events — :class:`ConversationParkedError` naming the dead letter instead (an operator
    releases or skips it; an erase or a clear is never held, it releases the conversation itself)."""
    if read[1].parked:
        letter = await reads.parked_by(key)
        if letter is not None and letter.partition == partition and min_offset >= letter.offset:
            raise ConversationParkedError(
                dead_letter_id=letter.dead_letter_id,
                partition=letter.partition,
                offset=letter.offset,
                error_code=letter.error_code,
                min_offset=min_offset,
            )
    return read
