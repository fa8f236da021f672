"""The context a model is sent: live from the read models (optionally after ``min_offset``), or
rebuilt from the log exactly as it was served at ``as_of`` or ``before_message``."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated

from fastapi import APIRouter, Query, Request

from events.blocks import ApiFormat
from events.errors import InvalidRequestError
from events.keys import ConversationKey, partition_for_key
from events.log import EventLog
from projectors.positions_watch import PositionsWatch, next_look, read_until_passed
from projectors.tokens import cached_counter as _counter
from projectors.tokens import model_spec
from projectors.window import WindowPolicy
from query_api.as_of import BeforeMessage, OffsetBeyondLogEndError, PolicyAt, UnknownMessageError, refuse_beyond_log_end
from query_api.context import NeedOlderMessagesError, assemble
from query_api.context_types import Context, ContextRequest, ModelSpec, NoRoomError, ReasoningPolicy, StoredMessage
from query_api.disconnects import unless_disconnected
from query_api.http.deps import PREFIX, ApiDeps, ApiError, AuthHeader, Requests
from query_api.http.fast_json import FastJSONResponse
from query_api.http.fast_params import FastParamsRoute
from query_api.ports import ContextInputs, ReadModels
from query_api.served import context_as_of, context_body

CACHEABLE_PREFIX_HEADER = "Convlog-Cacheable-Prefix-Tokens"
# The read-models version a live context was served from: with ``as_of`` (or ``before_message``)
# and ``read_models_version``, an audit rebuilds it with that version's window, even where the
# log alone cannot tell (a conversation read again after a switch with no event of its own).
VERSION_HEADER = "Convlog-Read-Models-Version"
"""Leading tokens of this context equal to the previous one served for the conversation (query_api/cache_prefix.py)."""
NEWEST_FIRST = 128  # rows read first; most budgets end inside them
MAX_NEWEST = 4096  # beyond that, read the whole range


class RowsNeeded:
    """How many newest rows the next context of a conversation, encoding and budget should read
    first, judged by what the rows of the last one cost, for the ``size`` long-range
    conversations served last: a long range (turns no summary covers yet) takes one read
    instead of two, turn after turn. Only a first guess: too few rows still read again, and a
    range shorter than the guess is read whole — the answer is the whole range's either way."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._rows: OrderedDict[tuple[str, str, int], int | None] = OrderedDict()

    def first(self, key: tuple[str, str, int]) -> int | None:
        return self._rows.get(key, NEWEST_FIRST)

    def read_with(self, key: tuple[str, str, int], newest: int | None) -> None:
        """Start the next such context with ``newest`` rows (None: the whole range)."""
        if newest is not None and newest <= NEWEST_FIRST:
            self._rows.pop(key, None)  # the default does: keep the memory for long ranges
            return
        self._rows[key] = newest
        self._rows.move_to_end(key)
        if len(self._rows) > self._size:
            self._rows.popitem(last=False)


def context_routes(deps: ApiDeps) -> APIRouter:
    # The hot route: its parameters validated without FastAPI's per-request introspection.
    router = APIRouter(route_class=FastParamsRoute)
    requests = Requests(deps)
    rows_needed = RowsNeeded()

    async def served_then(
        http_request: Request, key: ConversationKey, request: ContextRequest, spec: ModelSpec,
        as_of: int | None, before_message: str | None, version: int | None,
    ) -> tuple[Context, ContextInputs]:  # fmt: skip
        """The context as served at ``as_of`` / before ``before_message``, rebuilt from the log;
        with ``version``, as read-models version ``version`` served it."""
        policy: WindowPolicy | PolicyAt | None
        if version is not None:
            policy = None if deps.version_policy is None else await deps.version_policy(version)
            if policy is None:
                raise ApiError(422, "unknown_version", f"read-models version {version} never served contexts",
                               field="read_models_version")  # fmt: skip
        else:
            # The window of the version that served it: live when the context's last event was projected.
            policy = deps.policy if deps.policy_at is None else deps.policy_at
        pairs = await unless_disconnected(http_request, requests.logged_events(key))
        if as_of is not None:  # the rule min_offset has: never a context "after" an event the log does not hold
            await _held(deps.log, partition_for_key(key.encode(), deps.log.partition_count), as_of, "as_of")
        point = as_of if as_of is not None else BeforeMessage(before_message or "")
        try:
            served = await unless_disconnected(http_request, context_as_of(
                deps.log, key, point, request=request, spec=spec, policy=policy,
                max_event_bytes=deps.max_event_bytes, start_offset=pairs[0][0].offset, pairs=pairs))  # fmt: skip
        except UnknownMessageError as e:
            raise ApiError(404, e.code, str(e), field="before_message") from e
        if served is None:
            at = f"offset {as_of}" if as_of is not None else f"message {before_message!r}"
            raise ApiError(404, "not_found", f"the conversation had no event before {at}")
        return served

    @router.get(PREFIX + "/{conversation_id}/context")
    async def context(
        http_request: Request,
        user_id: str,
        conversation_id: str,
        model: Annotated[str, Query(min_length=1, max_length=200)],
        budget_tokens: Annotated[int, Query(gt=0, le=10_000_000)],
        reserve_tokens: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
        tools_tokens: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
        reasoning: ReasoningPolicy = "omit",
        format: ApiFormat = "chat_completions",  # noqa: A002 -- the query parameter's public name
        cache: bool = False,  # noqa: FBT001, FBT002 -- a query parameter, passed by name by FastAPI
        min_offset: Annotated[int | None, Query(ge=0)] = None,
        as_of: Annotated[int | None, Query(ge=0)] = None,
        before_message: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
        read_models_version: Annotated[int | None, Query(ge=1)] = None,
        authorization: AuthHeader = None,
    ) -> FastJSONResponse:
        key = requests.key_of(authorization, user_id, conversation_id)
        try:
            spec = model_spec(model, default_encoding=deps.default_encoding)
        except InvalidRequestError as e:
            raise ApiError(422, "invalid_request", str(e), field="model") from e
        reads = await deps.reads()
        request = ContextRequest(model, budget_tokens, reserve_tokens, tools_tokens, reasoning, deps.image_turns,
                                 format=format, cache=cache)  # fmt: skip
        _refuse_no_room(request)
        if as_of is not None and before_message is not None:
            raise ApiError(422, "invalid_request", "give as_of or before_message, not both", field="before_message")
        live = as_of is None and before_message is None
        if live and read_models_version is not None:
            raise ApiError(422, "invalid_request", "read_models_version goes with as_of or before_message",
                           field="read_models_version")  # fmt: skip
        if not live:  # rebuilt from the log, exactly as served then
            ctx, inputs = await served_then(http_request, key, request, spec, as_of, before_message,
                                            read_models_version)  # fmt: skip
        else:
            ctx, inputs, reads = await _live(deps, reads, key, spec, request, rows_needed, min_offset)
        deps.metrics.context_served(ctx.token_count)
        # Plain JSON types already: skip FastAPI's encoder and response validation on the hot path.
        response = FastJSONResponse(context_body(ctx, inputs, spec, counted=deps.counted_encodings))
        # A header, so that the body stays what as_of rebuilds byte for byte; a context rebuilt for
        # an audit is not one a model was sent again.
        if live and reads.version is not None:
            response.headers[VERSION_HEADER] = str(reads.version)
        prefix = deps.prefixes.served((str(key), format, model), ctx.units) if live else None
        if prefix is not None:
            response.headers[CACHEABLE_PREFIX_HEADER] = str(prefix)
            deps.metrics.cacheable_prefix(format, prefix=prefix, tokens=sum(tokens for _, tokens in ctx.units))
        return response

    return router


async def _live(
    deps: ApiDeps, reads: ReadModels, key: ConversationKey, spec: ModelSpec, request: ContextRequest,
    rows_needed: RowsNeeded, min_offset: int | None,
) -> tuple[Context, ContextInputs, ReadModels]:  # fmt: skip
    """The live context, and the reads it came from; with ``min_offset``, once the read models
    hold it (read-your-writes). The projector's commit is taken as a hint and confirmed by the
    context read itself (:func:`_reflects`); only when that read does not show it does the wait
    ask the read models' positions, and read again. A wait follows a switch of the live version
    made meanwhile (its positions, then its context), never waits out a retired one's."""
    if min_offset is None:
        return *await _assemble(reads, key, spec, request, rows_needed), reads
    partition = partition_for_key(key.encode(), deps.log.partition_count)
    if deps.log_behind is not None:  # never confirm an offset the projection did not take from this log
        deps.log_behind(partition)
    waited = time.perf_counter()
    hinted = await _wait_for(reads, deps.log, partition, min_offset, deps.wait_for_offset_s, deps.positions,
                             trust_hint=True, follow=deps.reads)  # fmt: skip
    deps.metrics.freshness(time.perf_counter() - waited)
    reads = await deps.reads()
    try:
        ctx, inputs = await _assemble(reads, key, spec, request, rows_needed)
        if not hinted or _reflects(inputs, partition, min_offset):
            return (*await _unless_parked(reads, key, partition, min_offset, ctx, inputs), reads)
    except ApiError as e:
        if not hinted or e.status != 404:
            raise  # (a 404 after a hint: not even the conversation is in these read models yet)
    # The hint is not in these read models (another version's commit, or an offset of another
    # conversation): wait for the read models' own word, then read again.
    await _wait_for(reads, deps.log, partition, min_offset, deps.wait_for_offset_s, deps.positions,
                    follow=deps.reads)  # fmt: skip
    reads = await deps.reads()
    ctx, inputs = await _assemble(reads, key, spec, request, rows_needed)
    return (*await _unless_parked(reads, key, partition, min_offset, ctx, inputs), reads)


async def _unless_parked(
    reads: ReadModels, key: ConversationKey, partition: int, min_offset: int, ctx: Context, inputs: ContextInputs
) -> tuple[Context, ContextInputs]:
    """Read-your-writes on a parked conversation: its records from the dead letter's on are
    held, so a context asked to reflect ``min_offset`` at or past it would miss acknowledged
    events — 409 ``conversation_parked`` naming the dead letter instead (an operator releases
    or skips it; an erase or a clear is never held, it releases the conversation itself)."""
    if inputs.parked:
        letter = await reads.parked_by(key)
        if letter is not None and letter.partition == partition and min_offset >= letter.offset:
            raise ApiError(409, "conversation_parked", f"the conversation is parked behind dead letter "
                           f"{letter.dead_letter_id} (partition {letter.partition}, offset {letter.offset}, "
                           f"{letter.error_code}): its events from there on are held, so no context reflects "
                           f"offset {min_offset} until an operator releases or skips it (convlog dead-letters)",
                           dead_letter_id=letter.dead_letter_id, partition=letter.partition, offset=letter.offset,
                           error_code=letter.error_code)  # fmt: skip
    return ctx, inputs


async def _assemble(
    reads: ReadModels, key: ConversationKey, spec: ModelSpec, request: ContextRequest,
    rows_needed: RowsNeeded | None = None,
) -> tuple[Context, ContextInputs]:  # fmt: skip
    """Turns no summary covers yet stay in the context's range, which can be long: read its
    newest rows first (as many as the conversation's last such context was read with, by
    ``rows_needed``), more only when the budget reaches back further (as many as the budget
    needs by the first rows' costs, then everything) — the answer is the one the whole range
    gives."""
    count = _counter(spec.encoding)
    available = request.message_budget
    hint = (str(key), spec.encoding, available)
    newest = NEWEST_FIRST if rows_needed is None else rows_needed.first(hint)
    while True:
        inputs = await reads.context_inputs(key, encoding=spec.encoding, newest=newest)
        if inputs is None:
            raise ApiError(404, "not_found", "no such conversation")
        try:
            ctx = assemble(
                system=inputs.system, summary=inputs.summary, messages=inputs.messages, request=request, spec=spec,
                count=count, complete=inputs.complete, usable_turns=inputs.usable_turns,
            )  # fmt: skip
        except NeedOlderMessagesError:
            # Read enough rows next time for the budget, judging by what these cost.
            wanted = _rows_for(inputs.messages, available, spec)
            newest = None if newest is None or wanted > MAX_NEWEST else max(wanted, 2 * len(inputs.messages))
            continue
        if rows_needed is not None:  # by what these rows cost: fewer next time if they grew
            wanted = _rows_for(inputs.messages, available, spec)
            rows_needed.read_with(hint, None if wanted > MAX_NEWEST else wanted)
        return ctx, inputs


def _rows_for(read: Sequence[StoredMessage], available: int, spec: ModelSpec) -> int:
    """How many rows the budget reaches back to, with half again for a margin, judging by what
    the rows ``read`` cost."""
    spent = sum(m.tokens + spec.tokens_per_message + 1 for m in read) or 1
    return int(len(read) * available / spent * 1.5) + 1


async def _wait_for(
    reads: ReadModels, log: EventLog, partition: int, offset: int, timeout_s: float,
    watch: PositionsWatch | None = None, *, trust_hint: bool = False,
    follow: Callable[[], Awaitable[ReadModels]] | None = None,
) -> bool:  # fmt: skip
    """Read-your-writes: wait (bounded) until the projection applied ``offset``. An offset the
    log does not hold can never be reached: 422 at once, instead of polling Postgres for the
    whole wait (the log's end is asked only when the projection is not there yet). With
    ``watch`` (told the commits of this process's projector, and of every projector while its
    Postgres listener is up) the wait ends at the commit that passes ``offset``; the read
    models confirm it, so a hint never serves a version that lacks it — with ``trust_hint``,
    the caller does, from the context it reads next (:func:`_reflects`: one round trip fewer),
    and True says the wait ended on the watch's word alone. With ``follow`` (the live version's
    reads), each look after the first reads the positions of the version live then."""
    seen = watch.commits if watch is not None else 0
    # A listening watch that says the partition is behind saves the read that would say so too.
    skip_first_read = trust_hint and watch is not None and watch.behind(partition, offset)
    if not skip_first_read and await reads.projection_position(partition) > offset:
        return False
    await _held(log, partition, offset, "min_offset")
    deadline = asyncio.get_running_loop().time() + timeout_s
    if trust_hint and watch is not None:
        await next_look(watch, partition, offset, timeout_s, seen=seen)
        if watch.passed(partition, offset):
            return True

    async def read_position() -> int:
        return await (reads if follow is None else await follow()).projection_position(partition)

    position = await read_until_passed(read_position, watch, partition, offset, deadline=deadline)
    if position <= offset:
        # The projectors may run in other processes (API-only instances): say how far they got.
        raise ApiError(503, "not_caught_up", f"the read models have not reached offset {offset} of partition "
                       f"{partition} within {timeout_s:g} s (the projection's next offset there is {position}): "
                       "the projectors are behind or not running; retry later",
                       partition=partition, projected=position)  # fmt: skip
    return False


def _refuse_no_room(request: ContextRequest) -> None:
    try:
        request.refuse_no_room()
    except NoRoomError as e:
        raise ApiError(422, e.code, str(e), field="reserve_tokens") from e


async def _held(log: EventLog, partition: int, offset: int, field: str) -> None:
    """422 ``offset_beyond_log_end`` (naming ``field``) for an offset the log does not hold yet."""
    try:
        await refuse_beyond_log_end(log, partition, offset)
    except OffsetBeyondLogEndError as e:
        raise ApiError(422, e.code, str(e), field=field, partition=e.partition) from e


def _reflects(inputs: ContextInputs, partition: int, offset: int) -> bool:
    """Whether these read models (one snapshot) hold ``offset`` of ``partition`` for sure: the
    conversation's own last event is at or past it (positions and rows commit together)."""
    return inputs.partition == partition and inputs.last_offset >= offset
