"""OpenAI's Conversations API (``/v1/conversations``) on convlog's log: what the ``openai`` SDK's
``client.conversations`` and the Agents SDK's ``OpenAIConversationsSession`` call, unchanged but
for the client's ``base_url`` and key (docs/openai-conversations.md).

- The tenant comes from the token, as everywhere; the user (OpenAI has none) from the
  ``Convlog-User-Id`` header, else ``CONVLOG_OPENAI_USER_ID``. A conversation is
  ``(tenant, user, conv_…)``: another user's is 404, like another tenant's.
- Create appends a ``ConversationStarted`` (the metadata) and the initial items, as Responses
  items, in ONE atomic batch. Items create appends its items as one batch too.
- Update metadata appends another ``ConversationStarted``: the fold adds keys and changes
  values but never removes one, so an update that would drop a key is refused (400
  ``metadata_key_removal_unsupported``) — never a 2xx that did not persist.
- Delete a conversation is convlog's erase (stronger than OpenAI's, whose delete keeps the
  items); delete an item redacts the message that holds it (the audit keeps that it existed; a
  withdrawal would keep its content). A message that holds several items (reasoning and the
  answer it led to) cannot lose one alone: 400 ``item_shares_message`` names the others.
- Reads fold the conversation's events from the log (query_api/openai_conversations.py): they
  see every write acknowledged before them. Errors are in OpenAI's shape (openai_errors.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Query
from fastapi.responses import JSONResponse

from events.batches import NativeBatch
from events.errors import NativeFormatError
from events.event_types import ConversationStarted, MessageAppended
from events.keys import ConversationKey
from query_api.http.deps import ApiDeps, ApiError, AuthHeader, Requests
from query_api.http.fast_json import FastJSONResponse
from query_api.http.openai_errors import OPENAI_PREFIX
from query_api.http.strict_json import StrictJsonRoute
from query_api.log_reads import conversation_records
from query_api.openai_conversations import ConversationItem, OpenAIConversation, fold_conversation
from query_api.orphans import first_orphan

MAX_METADATA_KEYS, MAX_KEY_CHARS, MAX_VALUE_CHARS = 16, 64, 512  # OpenAI's limits
MAX_ITEMS = 20  # per create request, as OpenAI
USER_HEADER = "Convlog-User-Id"
UserHeader = Annotated[str | None, Header(alias=USER_HEADER, description="the convlog user (else the default)")]
ItemsBody = Annotated[list[dict[str, Any]] | None, Body(embed=True, max_length=MAX_ITEMS)]
MetadataBody = Annotated[dict[str, Any] | None, Body(embed=True)]
Include = Annotated[
    list[str] | None,
    Query(alias="include[]", description="as the openai SDK sends it; changes nothing: items come whole, as stored"),
]


def openai_conversation_routes(deps: ApiDeps) -> APIRouter:
    router = APIRouter(prefix=OPENAI_PREFIX, route_class=StrictJsonRoute, tags=["OpenAI Conversations API"])
    helpers = _Helpers(deps, Requests(deps))
    _conversation_routes(router, helpers)
    _item_routes(router, helpers)
    return router


@dataclass(frozen=True)
class _Helpers:
    deps: ApiDeps
    requests: Requests

    def key_of(self, authorization: str | None, user: str | None, conversation_id: str) -> ConversationKey:
        return self.requests.key_of(authorization, user or self.deps.http.openai_user_id, conversation_id)

    async def folded(self, key: ConversationKey) -> OpenAIConversation:
        queries = self.deps.queries
        reads = await queries.reads()
        pairs = await conversation_records(queries.log, reads, key, codec=queries.codec)
        conversation = fold_conversation(pairs, max_event_bytes=queries.max_event_bytes, codec=queries.codec)
        if conversation is None:
            raise ApiError(404, "not_found", f"no conversation {key.conversation_id!r}", field="conversation_id")
        return conversation

    def items_batch(
        self, key: ConversationKey, items: list[dict[str, Any]], open_calls: tuple[str, ...]
    ) -> NativeBatch:
        """The items as one batch; an output whose call is neither among them nor open is refused."""
        batch = self.deps.producer.build_native(key, "responses", items)
        messages = tuple(e.body for e in batch.events if isinstance(e.body, MessageAppended))
        orphan = first_orphan(messages, open_calls)
        if orphan is not None:
            raise NativeFormatError(
                f"answers call {messages[orphan].tool_call_id!r}, which is neither among these "
                "items nor open in the conversation",
                field=f"items.{batch.answer_path(orphan)}",
                code="orphan_tool_result",
            )
        return batch


def _conversation_routes(router: APIRouter, h: _Helpers) -> None:
    deps, key_of, folded = h.deps, h.key_of, h.folded

    @router.post("")
    async def create(
        items: ItemsBody = None,
        metadata: MetadataBody = None,
        authorization: AuthHeader = None,
        user: UserHeader = None,
    ) -> JSONResponse:
        """A new conversation ``conv_…`` with its metadata and initial items (at most 20), one batch."""
        key = key_of(authorization, user, f"conv_{uuid.uuid4().hex}{uuid.uuid4().hex[:16]}")
        started = deps.producer.build(key, ConversationStarted(metadata=checked_metadata(metadata)))
        built = h.items_batch(key, items, ()).built if items else ()
        await deps.producer.append_batch(NativeBatch((started, *built), deterministic=False))
        return FastJSONResponse(_conversation(key, await folded(key)))

    @router.get("/{conversation_id}")
    async def retrieve(conversation_id: str, authorization: AuthHeader = None, user: UserHeader = None) -> JSONResponse:
        key = key_of(authorization, user, conversation_id)
        return FastJSONResponse(_conversation(key, await folded(key)))

    @router.post("/{conversation_id}")
    async def update(
        conversation_id: str,
        metadata: MetadataBody = None,
        authorization: AuthHeader = None,
        user: UserHeader = None,
    ) -> JSONResponse:
        """The metadata, whole (as OpenAI's update): keys may be added and values changed; a key
        it leaves out cannot be removed from the log's record (400, nothing appended)."""
        key = key_of(authorization, user, conversation_id)
        wanted = checked_metadata(metadata)
        current = await folded(key)
        dropped = sorted(set(current.metadata) - set(wanted))
        if dropped:
            raise ApiError(
                400,
                "metadata_key_removal_unsupported",
                f"convlog cannot remove metadata keys {dropped}: "
                "its log records metadata as additions and changes only; send every key",
                field="metadata",
            )
        if dict(current.metadata) != wanted:
            await deps.producer.append(key, ConversationStarted(metadata=wanted))
        return FastJSONResponse(_conversation(key, await folded(key)))

    @router.delete("/{conversation_id}")
    async def delete(conversation_id: str, authorization: AuthHeader = None, user: UserHeader = None) -> JSONResponse:
        """convlog's erase: the content leaves every read model and no context serves it again —
        stronger than OpenAI's delete, which keeps the items."""
        key = key_of(authorization, user, conversation_id)
        await folded(key)
        erasure = await deps.producer.erase_conversation(
            key,
            reason="deleted through the OpenAI Conversations API",
            requested_by=h.requests.caller(authorization).requested_by,
        )
        destroyed = len(erasure.destroyed_key_ids)
        deps.queries.metrics.erasures.erased("conversation", destroyed_keys=destroyed, already=erasure.already)
        return FastJSONResponse({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


def _item_routes(router: APIRouter, h: _Helpers) -> None:
    deps, key_of, folded = h.deps, h.key_of, h.folded

    @router.post("/{conversation_id}/items")
    async def create_items(
        conversation_id: str,
        items: Annotated[list[dict[str, Any]], Body(embed=True, min_length=1, max_length=20)],
        include: Include = None,  # noqa: ARG001 - accepted, see Include
        authorization: AuthHeader = None,
        user: UserHeader = None,
    ) -> JSONResponse:
        """Responses items, appended as one atomic batch (all or none); the stored items back."""
        key = key_of(authorization, user, conversation_id)
        batch = h.items_batch(key, items, (await folded(key)).open_calls)
        await deps.producer.append_batch(batch)
        made = {e.body.message_id for e in batch.events if isinstance(e.body, MessageAppended)}
        return FastJSONResponse(_page([i for i in (await folded(key)).items if i.message_id in made], more=False))

    @router.get("/{conversation_id}/items")
    async def list_items(
        conversation_id: str,
        after: str | None = None,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        order: Literal["asc", "desc"] = "desc",
        include: Include = None,  # noqa: ARG001 - accepted, see Include
        authorization: AuthHeader = None,
        user: UserHeader = None,
    ) -> JSONResponse:
        """A page of items, newest first by default; ``after`` is the last item id of the page before."""
        items = list((await folded(key_of(authorization, user, conversation_id))).items)
        if order == "desc":
            items.reverse()
        start = 0
        if after is not None:
            start = next((i + 1 for i, item in enumerate(items) if item.id == after), -1)
            if start < 0:
                raise ApiError(400, "invalid_cursor", f"the conversation has no item {after!r}", field="after")
        return FastJSONResponse(_page(items[start : start + limit], more=start + limit < len(items)))

    @router.get("/{conversation_id}/items/{item_id:path}")
    async def retrieve_item(
        conversation_id: str,
        item_id: str,
        include: Include = None,  # noqa: ARG001 - accepted, see Include
        authorization: AuthHeader = None,
        user: UserHeader = None,
    ) -> JSONResponse:
        conversation = await folded(key_of(authorization, user, conversation_id))
        return FastJSONResponse(_item(conversation, item_id).body)

    @router.delete("/{conversation_id}/items/{item_id:path}")
    async def delete_item(
        conversation_id: str, item_id: str, authorization: AuthHeader = None, user: UserHeader = None
    ) -> JSONResponse:
        """Redacts the message that holds the item (``MessageRedacted``): its content leaves every
        read model and context; the audit keeps that it existed. The conversation back."""
        key = key_of(authorization, user, conversation_id)
        conversation = await folded(key)
        item = _item(conversation, item_id)
        if item.siblings > 1:
            others = [i.id for i in conversation.items if i.message_id == item.message_id and i.id != item_id]
            raise ApiError(
                400,
                "item_shares_message",
                f"item {item_id!r} is stored in one message with items "
                f"{others}; convlog deletes a stored message whole, not one of its items",
                field="item_id",
                items=others,
            )
        await deps.producer.redact(key, item.message_id, reason="deleted through the OpenAI Conversations API")
        return FastJSONResponse(_conversation(key, await folded(key)))


def checked_metadata(metadata: Mapping[str, Any] | None) -> dict[str, str]:
    """OpenAI's limits: at most 16 keys of at most 64 characters, string values of at most 512."""
    metadata = metadata or {}
    if len(metadata) > MAX_METADATA_KEYS:
        raise ApiError(
            400, "invalid_metadata", f"at most {MAX_METADATA_KEYS} metadata keys, not {len(metadata)}", field="metadata"
        )
    for k, v in metadata.items():
        if len(k) > MAX_KEY_CHARS:
            raise ApiError(
                400, "invalid_metadata", f"a metadata key is at most {MAX_KEY_CHARS} characters", field=f"metadata.{k}"
            )
        if not isinstance(v, str) or len(v) > MAX_VALUE_CHARS:
            raise ApiError(
                400,
                "invalid_metadata",
                f"a metadata value is a string of at most {MAX_VALUE_CHARS} characters",
                field=f"metadata.{k}",
            )
    return dict(metadata)


def _item(conversation: OpenAIConversation, item_id: str) -> ConversationItem:
    item = conversation.item(item_id)
    if item is None:
        raise ApiError(404, "item_not_found", f"the conversation has no item {item_id!r}", field="item_id")
    return item


def _conversation(key: ConversationKey, conversation: OpenAIConversation) -> dict[str, Any]:
    return {
        "id": key.conversation_id,
        "object": "conversation",
        "created_at": conversation.created_at,
        "metadata": dict(conversation.metadata),
    }


def _page(items: list[ConversationItem], *, more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [i.body for i in items],
        "first_id": items[0].id if items else None,
        "last_id": items[-1].id if items else None,
        "has_more": more,
    }
