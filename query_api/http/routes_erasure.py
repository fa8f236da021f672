"""Erasure and keys (docs/erasure.md): erasing a whole user, and a conversation's data key for a
foreign producer that seals its own records (docs/producers.md, Sealed records).

``DELETE /v1/users/{user_id}`` destroys the user's keys at once — every conversation key of the
user with them, so every copy of their sealed content (log, read models, archives) is
unreadable before the answer — then appends an erase event to each of the user's
conversations, which clears the read models as the projection reaches it. 404 for a user
nothing is known of; erasing again is a no-op answer (``already``).
"""

from __future__ import annotations

import base64

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from events.errors import SubjectNotFoundError
from events.keys import ConversationKey
from events.sealing.keys import UserSubject
from query_api.http.deps import PREFIX, ApiDeps, ApiError, AuthHeader, Requests
from query_api.http.strict_json import StrictJsonRoute

_PAGE = 200


def erasure_routes(deps: ApiDeps) -> APIRouter:
    router = APIRouter(route_class=StrictJsonRoute)
    requests = Requests(deps)

    @router.post(PREFIX + "/{conversation_id}/key")
    async def data_key(user_id: str, conversation_id: str, authorization: AuthHeader = None) -> JSONResponse:
        """The conversation's data key, for a producer that seals its own records: created on
        first use; the same until the conversation (or its user) is erased, then a new one.
        Keep it in memory only. 409 ``sealing_off`` when this service seals nothing."""
        key = requests.key_of(authorization, user_id, conversation_id)
        keys = deps.producer.keys
        if keys is None or not deps.producer.seals:
            raise ApiError(409, "sealing_off", "this service writes plain records: it has no key store")
        data_key = await keys.ensure(key)
        return JSONResponse(
            {
                "key_id": data_key.key_id,
                "key": base64.b64encode(data_key.secret).decode("ascii"),
                "algorithm": "AES-256-GCM",
            },
            headers={"Cache-Control": "no-store"},
        )

    @router.delete("/v1/users/{user_id}", status_code=202)
    async def erase_user(user_id: str, authorization: AuthHeader = None) -> JSONResponse:
        """Erase every conversation of the user (GDPR art. 17): keys first, then the events."""
        tenant_id = requests.tenant(authorization)
        user = UserSubject(tenant_id, user_id)
        known = await _conversations(deps, user)
        try:
            erasure = await deps.producer.erase_user(
                user,
                conversations=known,
                reason="user erased through the API",
                requested_by=requests.caller(authorization).requested_by,
            )
        except SubjectNotFoundError as e:
            raise ApiError(404, "not_found", "no such user") from e
        destroyed = len(erasure.destroyed_key_ids)
        deps.queries.metrics.erasures.erased("user", destroyed_keys=destroyed, already=erasure.already)
        return JSONResponse(
            {
                "user_id": user_id,
                "erased_conversations": [
                    {"conversation_id": c.conversation_id, "partition": a.partition, "offset": a.offset}
                    for c, a in erasure.erased
                ],
                "destroyed_keys": destroyed,
                "already": erasure.already,
            },
            status_code=202,
        )

    return router


async def _conversations(deps: ApiDeps, user: UserSubject) -> list[ConversationKey]:
    """The user's conversations the read models list (plain ones have no key to find them by)."""
    reads = await deps.queries.reads()
    found: list[ConversationKey] = []
    before: str | None = None
    while True:
        page, before = await reads.list_conversations(user.tenant_id, user.user_id, limit=_PAGE, before=before)
        found += [ConversationKey(user.tenant_id, user.user_id, c.conversation_id) for c in page]
        if before is None:
            return found
