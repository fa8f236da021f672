"""Appends: a message (idempotent with an ``Idempotency-Key``), a clear, an erase. ``202 Accepted``
with the record's partition and offset (``min_offset`` for read-your-writes)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header
from fastapi.responses import JSONResponse

from query_api.http.deps import PREFIX, ApiDeps, ApiError, AuthHeader, Requests, accepted
from query_api.http.strict_json import StrictJsonRoute
from query_api.idempotency import IdempotencyKeyReusedError, IdempotentAppends


def append_routes(deps: ApiDeps) -> APIRouter:
    router = APIRouter(route_class=StrictJsonRoute)
    requests = Requests(deps)
    idempotent = IdempotentAppends(deps.producer, deps.log, deps.reads)

    @router.post(PREFIX + "/{conversation_id}/messages", status_code=202)
    async def post_message(
        user_id: str,
        conversation_id: str,
        message: Annotated[dict[str, Any], Body()],
        authorization: AuthHeader = None,
        idempotency_key: Annotated[str | None, Header()] = None,
    ) -> JSONResponse:
        key = requests.key_of(authorization, user_id, conversation_id)
        if not idempotency_key:
            return accepted(await deps.producer.append_message(key, message))
        try:
            return accepted(await idempotent.append_message(key, message, event_id=idempotency_key))
        except IdempotencyKeyReusedError as e:
            raise ApiError(409, e.code, str(e), event_id=e.first.event_id, partition=e.first.partition,
                           offset=e.first.offset) from e  # fmt: skip

    @router.post(PREFIX + "/{conversation_id}/clear", status_code=202)
    async def clear(user_id: str, conversation_id: str, authorization: AuthHeader = None) -> JSONResponse:
        key = requests.key_of(authorization, user_id, conversation_id)
        await requests.held_by_log(key)
        return accepted(await deps.producer.clear(key))

    @router.delete(PREFIX + "/{conversation_id}", status_code=202)
    async def erase(user_id: str, conversation_id: str, authorization: AuthHeader = None) -> JSONResponse:
        key = requests.key_of(authorization, user_id, conversation_id)
        await requests.held_by_log(key)
        return accepted(await deps.producer.erase(key, reason="erased through the API"))

    return router
