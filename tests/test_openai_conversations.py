"""OpenAI's Conversations API on convlog, driven by the real ``openai`` SDK against a live
``convlog serve``: the app's only change is the client's ``base_url`` and key."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.live_server import TOKEN

pytestmark = pytest.mark.postgres

USER = "u-openai"


@pytest.fixture
def openai_client(served: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=f"{served}/v1", api_key=TOKEN, max_retries=0, default_headers={"Convlog-User-Id": USER}) as c:
        yield c


def _context(served: str, conversation_id: str, fmt: str, **params: int) -> httpx.Response:
    return httpx.get(
        f"{served}/v1/users/{USER}/conversations/{conversation_id}/context",
        params={"format": fmt, "model": "gpt-4o", "budget_tokens": 8000, **params},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )


def _events(served: str, conversation_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{served}/v1/users/{USER}/conversations/{conversation_id}/events", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert answer.status_code == 200, answer.text
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "lookup",
    "arguments": json.dumps({"city": "Paris"}),
    "status": "completed",
}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
ANSWER = {
    "type": "message",
    "id": "msg_2",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "It is sunny in Paris.", "annotations": []}],
}


def test_the_whole_lifecycle_through_the_sdk(openai_client: OpenAI, served: str) -> None:
    created = openai_client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "Weather in Paris?"}], metadata={"topic": "weather"}
    )
    assert created.id.startswith("conv_")
    assert created.object == "conversation"
    assert created.metadata == {"topic": "weather"}
    assert openai_client.conversations.retrieve(created.id).model_dump() == created.model_dump()

    added = openai_client.conversations.items.create(created.id, items=[CALL, OUTPUT, ANSWER])  # type: ignore[list-item]
    assert [item.type for item in added.data] == ["function_call", "function_call_output", "message"]
    assert added.first_id == "fc_1"
    assert added.last_id == "msg_2"
    assert added.data[0].model_dump(exclude_unset=True) == CALL  # stored ids kept, the item as sent

    asc = list(
        openai_client.conversations.items.list(created.id, order="asc", limit=2)
    )  # pages of 2, followed by `after`
    assert [item.type for item in asc] == ["message", "function_call", "function_call_output", "message"]
    user_item = asc[0].model_dump(exclude_unset=True)
    assert user_item == {
        "id": user_item["id"],
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Weather in Paris?"}],
    }
    included = openai_client.conversations.items.list(created.id, order="asc", include=["reasoning.encrypted_content"])
    assert [item.id for item in included.data] == [item.id for item in asc]  # include: items come back whole anyway
    page = openai_client.conversations.items.list(created.id, limit=3)  # desc by default, OpenAI's
    assert [item.id for item in page.data] == [asc[3].id, asc[2].id, asc[1].id]
    assert page.has_more
    assert [item.id for item in openai_client.conversations.items.list(created.id, after=asc[1].id).data] == [asc[0].id]
    assert openai_client.conversations.items.retrieve(asc[2].id, conversation_id=created.id).model_dump() == (
        asc[2].model_dump()
    )

    updated = openai_client.conversations.update(created.id, metadata={"topic": "travel", "city": "Paris"})
    assert updated.metadata == {"topic": "travel", "city": "Paris"}
    assert openai_client.conversations.retrieve(created.id).metadata == {"topic": "travel", "city": "Paris"}
    with pytest.raises(openai.BadRequestError) as refused:  # the log cannot drop a key: no 2xx that does not persist
        openai_client.conversations.update(created.id, metadata={"topic": "travel"})
    assert refused.value.code == "metadata_key_removal_unsupported"
    assert openai_client.conversations.retrieve(created.id).metadata == {"topic": "travel", "city": "Paris"}

    after_delete = openai_client.conversations.items.delete(asc[3].id, conversation_id=created.id)
    assert after_delete.id == created.id
    assert [i.id for i in openai_client.conversations.items.list(created.id, order="asc")] == [i.id for i in asc[:3]]

    written = _events(served, created.id)[-1]["offset"]
    for fmt in ("anthropic", "gemini", "chat_completions", "responses"):  # the same conversation in every format
        context = _context(served, created.id, fmt, min_offset=written)
        assert context.status_code == 200, context.text
        assert "Weather in Paris?" in context.text
        assert "sunny" in context.text

    deleted = openai_client.conversations.delete(created.id)
    assert (deleted.id, deleted.deleted, deleted.object) == (created.id, True, "conversation.deleted")
    with pytest.raises(openai.NotFoundError):
        openai_client.conversations.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        openai_client.conversations.items.list(created.id)
    events = _events(served, created.id)
    assert events[-1]["event_type"] == "ConversationErased"
    for gone in ("Paris", "sunny", "travel", "weather"):  # content and metadata: withheld from the log's reads
        assert gone not in json.dumps(events)
    erased_at = events[-1]["offset"]
    context = _context(served, created.id, "responses", min_offset=erased_at)
    assert context.json()["input"] == []  # no context serves it again


def test_refusals_are_the_sdks_typed_exceptions_in_openais_error_shape(openai_client: OpenAI, served: str) -> None:
    stranger = OpenAI(base_url=f"{served}/v1", api_key="not-a-token", max_retries=0)
    with stranger, pytest.raises(openai.AuthenticationError) as unauthorized:
        stranger.conversations.create()
    assert unauthorized.value.status_code == 401
    assert unauthorized.value.body == {
        "message": "a valid bearer token is required",
        "type": "authentication_error",
        "param": None,
        "code": "unauthorized",
    }
    with pytest.raises(openai.NotFoundError) as missing:
        openai_client.conversations.retrieve("conv_unknown")
    assert (missing.value.code, missing.value.param) == ("not_found", "conversation_id")
    conversation = openai_client.conversations.create(items=[{"role": "user", "content": "Hi"}])
    with pytest.raises(openai.NotFoundError) as no_item:
        openai_client.conversations.items.retrieve("msg_unknown", conversation_id=conversation.id)
    assert no_item.value.code == "item_not_found"

    too_many = {f"k{i}": "v" for i in range(17)}
    for metadata, param in (
        (too_many, "metadata"),
        ({"k" * 65: "v"}, "metadata." + "k" * 65),
        ({"k": "v" * 513}, "metadata.k"),
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            openai_client.conversations.create(metadata=metadata)
        assert (refused.value.code, refused.value.param) == ("invalid_metadata", param)
    assert openai_client.conversations.create(metadata={"k" * 64: "v" * 512, **{f"k{i}": "v" for i in range(15)}})

    with pytest.raises(openai.BadRequestError) as orphan:  # an output of no call: refused, nothing stored
        openai_client.conversations.items.create(conversation.id, items=[OUTPUT])  # type: ignore[list-item]
    assert orphan.value.code == "orphan_tool_result"
    robot: Any = {"type": "message", "role": "robot", "content": "x"}
    with pytest.raises(openai.BadRequestError) as bad_item:  # the Responses parser's own refusals
        openai_client.conversations.items.create(conversation.id, items=[robot])
    assert bad_item.value.code == "unknown_role"
    with pytest.raises(openai.BadRequestError):  # OpenAI's limit: 20 items a request
        openai_client.conversations.items.create(conversation.id, items=[{"role": "user", "content": "x"}] * 21)
    assert [i.type for i in openai_client.conversations.items.list(conversation.id)] == [
        "message"
    ]  # nothing else stored

    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "blob"}
    openai_client.conversations.items.create(conversation.id, items=[reasoning, ANSWER])  # type: ignore[list-item]
    with pytest.raises(openai.BadRequestError) as shared:  # one stored message: deleted whole or not at all
        openai_client.conversations.items.delete("msg_2", conversation_id=conversation.id)
    assert shared.value.code == "item_shares_message"
    assert [i.id for i in openai_client.conversations.items.list(conversation.id, limit=2).data] == ["msg_2", "rs_1"]


def test_a_conversation_is_its_users_the_default_user_is_a_setting(openai_client: OpenAI, served: str) -> None:
    conversation = openai_client.conversations.create(items=[{"role": "user", "content": "mine"}])
    other = OpenAI(
        base_url=f"{served}/v1", api_key=TOKEN, max_retries=0, default_headers={"Convlog-User-Id": "someone-else"}
    )
    with other, pytest.raises(openai.NotFoundError):
        other.conversations.retrieve(conversation.id)
    with OpenAI(base_url=f"{served}/v1", api_key=TOKEN, max_retries=0) as no_header:  # CONVLOG_OPENAI_USER_ID
        with pytest.raises(openai.NotFoundError):
            no_header.conversations.items.list(conversation.id)
        default = no_header.conversations.create(items=[{"role": "user", "content": "the default user's"}])
    stored = httpx.get(
        f"{served}/v1/users/default/conversations/{default.id}/events", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert "the default user's" in stored.text
