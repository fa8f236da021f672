"""Audit reads of one conversation: its transcript (paged), its summaries, its raw events."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from query_api.events_json import events_json
from query_api.http.deps import PREFIX, ApiDeps, ApiError, AuthHeader, Requests
from query_api.http.disconnects import unless_disconnected
from query_api.http.strict_json import StrictJsonRoute


def audit_routes(deps: ApiDeps) -> APIRouter:
    router = APIRouter(route_class=StrictJsonRoute)
    requests = Requests(deps)

    @router.get(PREFIX + "/{conversation_id}/messages")
    async def transcript(
        user_id: str,
        conversation_id: str,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        before: Annotated[int | None, Query(ge=0)] = None,
        authorization: AuthHeader = None,
    ) -> dict[str, Any]:
        key = requests.key_of(authorization, user_id, conversation_id)
        page = await (await deps.queries.reads()).transcript(key, limit=limit, before=before)
        if page is None:
            raise ApiError(404, "not_found", "no such conversation")
        entries, next_before = page
        return {"messages": entries, "next_before": next_before}

    @router.get(PREFIX + "/{conversation_id}/summaries")
    async def summaries(user_id: str, conversation_id: str, authorization: AuthHeader = None) -> dict[str, Any]:
        key = requests.key_of(authorization, user_id, conversation_id)
        entries = await (await deps.queries.reads()).summaries(key)
        if entries is None:
            raise ApiError(404, "not_found", "no such conversation")
        return {"summaries": entries}

    @router.get(PREFIX + "/{conversation_id}/events")
    async def raw_events(
        http_request: Request, user_id: str, conversation_id: str, authorization: AuthHeader = None
    ) -> dict[str, Any]:
        key = requests.key_of(authorization, user_id, conversation_id)
        return {"events": events_json(await unless_disconnected(http_request, deps.queries.logged_events(key)))}

    return router
