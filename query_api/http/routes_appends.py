"""Appends: messages (idempotent with an ``Idempotency-Key``), a redaction, a clear, an erase. ``202 Accepted``
with each record's partition and offset (``min_offset`` for read-your-writes).

``POST …/messages?format=<f>`` takes a payload in ``f`` (default ``chat_completions``: today's
message object, or a list of them) and appends all its messages as one atomic batch, or none.
A native payload (``anthropic``, ``responses``, ``gemini``) whose tool result answers no open
call is refused (422 ``orphan_tool_result``, see query_api/orphans.py)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query
from fastapi.responses import JSONResponse

from events.batches import NativeBatch
from events.errors import InvalidRequestError, NativeFormatError
from events.event_types import MessageAppended, MessageRedacted
from events.formats.registry import APPEND_FORMATS, NATIVE_FORMATS
from events.keys import ConversationKey
from events.producer import Appended
from query_api.http.deps import PREFIX, ApiDeps, ApiError, AuthHeader, Requests, accepted, appended_json
from query_api.http.fast_json import FastJSONResponse
from query_api.http.strict_json import StrictJsonRoute
from query_api.idempotency import IdempotencyKeyReusedError, IdempotentAppends
from query_api.log_reads import conversation_records
from query_api.orphans import first_orphan, needs_conversation_calls

FormatQuery = Annotated[
    str,
    Query(
        description="The payload's format: a Chat Completions message (or a list of them), or a provider's native "
        "JSON. Every message of it is appended as one atomic batch.",
        json_schema_extra={"enum": list(APPEND_FORMATS)},
    ),
]


def append_routes(deps: ApiDeps) -> APIRouter:
    router = APIRouter(route_class=StrictJsonRoute)
    requests = Requests(deps)
    idempotent = IdempotentAppends(deps.producer, deps.queries.log, deps.queries.reads, codec=deps.queries.codec)

    async def refuse_orphans(key: ConversationKey, batch: NativeBatch, messages: tuple[MessageAppended, ...]) -> None:
        """422 ``orphan_tool_result`` for a result whose call is neither earlier in the payload nor
        open in the conversation. The projection may lag the log — a call appended a moment ago
        not open yet, or answered a moment ago still open — so first wait (bounded, like
        ``min_offset``) until it reached the partition's end as of now."""
        calls: tuple[str, ...] = ()
        if needs_conversation_calls(messages):
            calls = await (await deps.queries.reads_past_log_end(key)).open_tool_calls(key)
        orphan = first_orphan(messages, calls)
        if orphan is not None:
            raise NativeFormatError(
                f"answers tool call {messages[orphan].tool_call_id!r}, which is neither in this "
                "payload nor open in the conversation",
                field=batch.answer_path(orphan),
                code="orphan_tool_result",
            )

    @router.post(PREFIX + "/{conversation_id}/messages", status_code=202)
    async def post_message(
        user_id: str,
        conversation_id: str,
        message: Annotated[dict[str, Any] | list[Any], Body()],
        authorization: AuthHeader = None,
        idempotency_key: Annotated[str | None, Header()] = None,
        format: FormatQuery = "chat_completions",  # noqa: A002 - the query parameter's name
    ) -> JSONResponse:
        key = requests.key_of(authorization, user_id, conversation_id)
        try:
            batch = deps.producer.build_native(key, format, message, event_id=_event_id(idempotency_key))
        except InvalidRequestError as e:  # unknown_format
            raise ApiError(422, e.code, str(e), field="format") from e
        messages = tuple(e.body for e in batch.events if isinstance(e.body, MessageAppended))

        async def check() -> None:
            if format in NATIVE_FORMATS:
                await refuse_orphans(key, batch, messages)

        if not batch.deterministic:
            await check()
            return _answer(format, message, await deps.producer.append_batch(batch))
        try:
            return _answer(format, message, await idempotent.append_batch(key, batch, before_append=check))
        except IdempotencyKeyReusedError as e:
            raise _key_reused(e) from e

    @router.post(PREFIX + "/{conversation_id}/messages/{message_id:path}/redact", status_code=202)
    async def redact(
        user_id: str,
        conversation_id: str,
        message_id: str,
        body: Annotated[dict[str, Any] | None, Body()] = None,
        authorization: AuthHeader = None,
        idempotency_key: Annotated[str | None, Header()] = None,
    ) -> JSONResponse:
        """``MessageRedacted``: the message's content leaves every read model and every context
        served from now on; the audit keeps that it existed. Body ``{"reason": "..."}``
        (optional). ``message_id`` may hold ``/`` (a native payload's second message is
        ``<first>/1``), percent-encoded or not. A message id the conversation does not hold in
        the log (a summary's id, an event id that is not a message's) is 404
        ``message_not_found``: nothing is appended. Redacting a message twice changes nothing.
        The ``Idempotency-Key`` becomes the redaction's event id, as on an append: the same key
        for the same redaction answers the first one's coordinates; a key something else holds
        (a message, another redaction) is 409 ``idempotency_key_reused`` with that event's
        coordinates, and nothing is appended."""
        key = requests.key_of(authorization, user_id, conversation_id)
        reason = (body or {}).get("reason", "redacted through the API")
        if not isinstance(reason, str) or not reason:
            raise ApiError(422, "invalid_reason", "reason must be a non-empty string", field="reason")
        return await _redact(requests, idempotent, key, message_id, reason, _event_id(idempotency_key))

    @router.post(PREFIX + "/{conversation_id}/clear", status_code=202)
    async def clear(user_id: str, conversation_id: str, authorization: AuthHeader = None) -> JSONResponse:
        key = requests.key_of(authorization, user_id, conversation_id)
        await deps.queries.held_by_log(key)
        return accepted(await deps.producer.clear(key))

    @router.delete(PREFIX + "/{conversation_id}", status_code=202)
    async def erase(user_id: str, conversation_id: str, authorization: AuthHeader = None) -> JSONResponse:
        key = requests.key_of(authorization, user_id, conversation_id)
        await deps.queries.held_by_log(key)
        erasure = await deps.producer.erase_conversation(
            key, reason="erased through the API", requested_by=requests.caller(authorization).requested_by
        )
        destroyed = len(erasure.destroyed_key_ids)
        deps.queries.metrics.erasures.erased("conversation", destroyed_keys=destroyed, already=erasure.already)
        answer = appended_json(erasure.appended)
        return FastJSONResponse({**answer, "destroyed_keys": destroyed, "already": erasure.already}, status_code=202)

    return router


async def _redact(
    requests: Requests,
    idempotent: IdempotentAppends,
    key: ConversationKey,
    message_id: str,
    reason: str,
    event_id: str | None,
) -> JSONResponse:
    """Append the redaction once the log shows the conversation holds the message (404 else);
    with an ``event_id`` (the Idempotency-Key), only if no other event holds it (409)."""
    producer, queries = requests.deps.producer, requests.deps.queries
    built = producer.build(key, MessageRedacted(message_id=message_id, reason=reason), event_id=event_id)

    async def has_message() -> None:
        # From the log (the read models may lag), past records this build cannot decode.
        events = await conversation_records(queries.log, await queries.reads(), key, skip_undecodable=True)
        if not events:
            await queries.held_by_log(key)  # 404 for no conversation
        if not any(isinstance(e.body, MessageAppended) and e.body.message_id == message_id for _, e in events):
            raise ApiError(
                404, "message_not_found", f"the conversation has no message {message_id!r}", field="message_id"
            )

    if event_id is None:
        await has_message()
        return accepted(await producer.append_built(*built))
    batch = NativeBatch((built,), deterministic=True, next_event_id=f"{event_id}/1")
    try:
        return accepted((await idempotent.append_batch(key, batch, before_append=has_message))[0])
    except IdempotencyKeyReusedError as e:
        raise _key_reused(e) from e


def _key_reused(e: IdempotencyKeyReusedError) -> ApiError:
    """409: the coordinates of the event that holds the key; nothing was appended."""
    return ApiError(409, e.code, str(e), event_id=e.first.event_id, partition=e.first.partition, offset=e.first.offset)


# The event ids convlog gives a batch's later messages: ``<first>/1``, ``<first>/2``, …
_DERIVED_EVENT_ID = re.compile(r"/[0-9]+\Z")


def _event_id(idempotency_key: str | None) -> str | None:
    """The event id an ``Idempotency-Key`` gives (None: a fresh one). A key of a derived id's
    shape could take the id of a later batch's message, which the projections would then drop as
    a repeat: 422 ``invalid_idempotency_key`` before anything is appended."""
    if not idempotency_key:
        return None
    if _DERIVED_EVENT_ID.search(idempotency_key):
        raise ApiError(
            422,
            "invalid_idempotency_key",
            f"Idempotency-Key {idempotency_key!r} ends in '/<number>', "
            "the shape of the ids convlog gives the later messages of a batch; use another key",
            field="Idempotency-Key",
        )
    return idempotency_key


def _answer(format: str, payload: object, appended: list[Appended]) -> JSONResponse:  # noqa: A002
    """Every stored message under ``messages``, and the last one's partition and offset (its
    ``min_offset``). One Chat Completions message object: the body it always had, plus the list."""
    listed = [
        {"event_id": a.event_id, "message_id": a.message_id, "partition": a.partition, "offset": a.offset}
        for a in appended
    ]
    if format == "chat_completions" and isinstance(payload, dict):
        return FastJSONResponse({**listed[0], "messages": listed}, status_code=202)
    last = appended[-1]
    return FastJSONResponse({"messages": listed, "partition": last.partition, "offset": last.offset}, status_code=202)
