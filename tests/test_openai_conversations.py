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

from tests.live_server import TOKEN, convlog_serve

pytestmark = pytest.mark.postgres

USER = "u-openai"


@pytest.fixture(scope="module")
def served(pg_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with convlog_serve(pg_admin_url, tmp_path_factory.mktemp("serve-openai")) as url:
        yield url


@pytest.fixture
def client(served: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=f"{served}/v1", api_key=TOKEN, max_retries=0,
                default_headers={"Convlog-User-Id": USER}) as c:  # fmt: skip
        yield c


def _context(served: str, conversation_id: str, fmt: str, **params: int) -> httpx.Response:
    return httpx.get(f"{served}/v1/users/{USER}/conversations/{conversation_id}/context",
                     params={"format": fmt, "model": "gpt-4o", "budget_tokens": 8000, **params},
                     headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip


def _events(served: str, conversation_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{served}/v1/users/{USER}/conversations/{conversation_id}/events",
                       headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
    assert answer.status_code == 200, answer.text
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup",
        "arguments": json.dumps({"city": "Paris"}), "status": "completed"}  # fmt: skip
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
ANSWER = {"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
          "content": [{"type": "output_text", "text": "It is sunny in Paris.", "annotations": []}]}  # fmt: skip


def test_the_whole_lifecycle_through_the_sdk(client: OpenAI, served: str) -> None:
    created = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "Weather in Paris?"}], metadata={"topic": "weather"}
    )
    assert created.id.startswith("conv_")
    assert created.object == "conversation"
    assert created.metadata == {"topic": "weather"}
    assert client.conversations.retrieve(created.id).model_dump() == created.model_dump()

    added = client.conversations.items.create(created.id, items=[CALL, OUTPUT, ANSWER])  # type: ignore[list-item]
    assert [item.type for item in added.data] == ["function_call", "function_call_output", "message"]
    assert added.first_id == "fc_1"
    assert added.last_id == "msg_2"
    assert added.data[0].model_dump(exclude_unset=True) == CALL  # stored ids kept, the item as sent

    asc = list(client.conversations.items.list(created.id, order="asc", limit=2))  # pages of 2, followed by `after`
    assert [item.type for item in asc] == ["message", "function_call", "function_call_output", "message"]
    user_item = asc[0].model_dump(exclude_unset=True)
    assert user_item == {"id": user_item["id"], "type": "message", "role": "user",
                         "content": [{"type": "input_text", "text": "Weather in Paris?"}]}  # fmt: skip
    page = client.conversations.items.list(created.id, limit=3)  # desc by default, OpenAI's
    assert [item.id for item in page.data] == [asc[3].id, asc[2].id, asc[1].id]
    assert page.has_more
    assert [item.id for item in client.conversations.items.list(created.id, after=asc[1].id).data] == [asc[0].id]
    assert client.conversations.items.retrieve(asc[2].id, conversation_id=created.id).model_dump() == (
        asc[2].model_dump()
    )

    updated = client.conversations.update(created.id, metadata={"topic": "travel", "city": "Paris"})
    assert updated.metadata == {"topic": "travel", "city": "Paris"}
    assert client.conversations.retrieve(created.id).metadata == {"topic": "travel", "city": "Paris"}
    with pytest.raises(openai.BadRequestError) as refused:  # the log cannot drop a key: no 2xx that does not persist
        client.conversations.update(created.id, metadata={"topic": "travel"})
    assert refused.value.code == "metadata_key_removal_unsupported"
    assert client.conversations.retrieve(created.id).metadata == {"topic": "travel", "city": "Paris"}

    after_delete = client.conversations.items.delete(asc[3].id, conversation_id=created.id)
    assert after_delete.id == created.id
    assert [i.id for i in client.conversations.items.list(created.id, order="asc")] == [i.id for i in asc[:3]]

    written = _events(served, created.id)[-1]["offset"]
    for fmt in ("anthropic", "gemini", "chat_completions", "responses"):  # the same conversation in every format
        context = _context(served, created.id, fmt, min_offset=written)
        assert context.status_code == 200, context.text
        assert "Weather in Paris?" in context.text
        assert "sunny" in context.text

    deleted = client.conversations.delete(created.id)
    assert (deleted.id, deleted.deleted, deleted.object) == (created.id, True, "conversation.deleted")
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.list(created.id)
    events = _events(served, created.id)
    assert events[-1]["event_type"] == "ConversationErased"
    for gone in ("Paris", "sunny", "travel", "weather"):  # content and metadata: withheld from the log's reads
        assert gone not in json.dumps(events)
    erased_at = events[-1]["offset"]
    context = _context(served, created.id, "responses", min_offset=erased_at)
    assert context.json()["input"] == []  # no context serves it again
