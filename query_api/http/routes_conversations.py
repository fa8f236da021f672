"""The list of a user's conversations, newest activity first, paged by an opaque cursor."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from events.errors import InvalidRequestError
from events.keys import ConversationKey
from query_api.http.deps import PREFIX, ApiDeps, ApiError, AuthHeader, Requests
from query_api.http.strict_json import StrictJsonRoute
from query_api.ports import MAX_CURSOR_CHARS


def conversation_routes(deps: ApiDeps) -> APIRouter:
    router = APIRouter(route_class=StrictJsonRoute)
    requests = Requests(deps)

    @router.get(PREFIX)
    async def conversations(
        user_id: str,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        before: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
        authorization: AuthHeader = None,
    ) -> dict[str, Any]:
        tenant_id = requests.tenant(authorization)
        ConversationKey(tenant_id, user_id, "x")  # validates user_id like every other route
        try:
            items, next_before = await (await deps.queries.reads()).list_conversations(
                tenant_id, user_id, limit=limit, before=before
            )
        except InvalidRequestError as e:
            raise ApiError(422, "invalid_request", str(e), field="before") from e
        return {
            "conversations": [
                {
                    "conversation_id": c.conversation_id,
                    "title": c.title,
                    "started_at": c.started_at.isoformat(),
                    "last_activity_at": c.last_activity_at.isoformat() if c.last_activity_at else None,
                    "message_count": c.message_count,
                    "turn_count": c.turn_count,
                    "erased": c.erased,
                    "cleared": c.cleared,
                    "degraded": c.parked,
                }
                for c in items
            ],
            "next_before": next_before,
        }

    return router
