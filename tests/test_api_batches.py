"""HTTP appends of several messages at once: ``?format=``, lists, atomicity, idempotency, and
the orphan tool result check of native formats (a fake native parser stands in for the real
ones, which live on other branches)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from convlog.runtime.serve import Service
from events.keys import ConversationKey, partition_for_key
from tests import fake_native

pytestmark = [pytest.mark.postgres, pytest.mark.service_settings(api_tokens="acme:token-a")]

A = {"Authorization": "Bearer token-a"}
BASE = "/v1/users/u1/conversations"
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
TURN = [
    {"role": "user", "content": "look it up"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    {"role": "assistant", "content": "it is 42"},
]


async def _post(
    http_client: httpx.AsyncClient, conversation: str, body: Any, fmt: str | None = None, **headers: str
) -> httpx.Response:
    params = {"format": fmt} if fmt else {}
    return await http_client.post(f"{BASE}/{conversation}/messages", json=body, params=params, headers={**A, **headers})


async def _end(api_service: Service, conversation: str) -> int:
    key = ConversationKey("acme", "u1", conversation)
    log = api_service.deps.queries.log
    return (await log.end_offsets())[partition_for_key(key.encode(), log.partition_count)]


async def _transcript(http_client: httpx.AsyncClient, conversation: str, offset: int) -> list[dict[str, Any]]:
    params = {"model": "gpt-4o", "budget_tokens": 100_000, "min_offset": offset}
    assert (await http_client.get(f"{BASE}/{conversation}/context", params=params, headers=A)).status_code == 200
    response = await http_client.get(f"{BASE}/{conversation}/messages", headers=A)
    assert response.status_code == 200, response.text
    entries: list[dict[str, Any]] = response.json()["messages"]
    return entries


async def test_a_list_is_appended_as_one_batch_and_listed(http_client: httpx.AsyncClient) -> None:
    response = await _post(http_client, "turn", TURN, "chat_completions", **{"Idempotency-Key": "t1"})
    assert response.status_code == 202, response.text
    body = response.json()
    listed = body["messages"]
    assert [m["event_id"] for m in listed] == ["t1", "t1/1", "t1/2", "t1/3"]
    offsets = [m["offset"] for m in listed]
    assert offsets == list(range(offsets[0], offsets[0] + 4))
    assert (body["partition"], body["offset"]) == (listed[-1]["partition"], offsets[-1])
    stored = await _transcript(http_client, "turn", offsets[-1])
    assert [(e["offset"], e["role"], e["message_id"]) for e in stored] == [
        (m["offset"], t["role"], m["message_id"]) for m, t in zip(listed, TURN, strict=True)
    ]


async def test_one_message_object_keeps_its_answer_and_adds_the_list(http_client: httpx.AsyncClient) -> None:
    response = await _post(http_client, "one", {"role": "user", "content": "hi"}, **{"Idempotency-Key": "k"})
    assert response.status_code == 202, response.text
    body = response.json()
    assert set(body) == {"event_id", "message_id", "partition", "offset", "messages"}
    assert body["messages"] == [{k: body[k] for k in ("event_id", "message_id", "partition", "offset")}]
    assert (body["event_id"], body["message_id"]) == ("k", "k")


async def test_one_invalid_message_refuses_the_whole_list(http_client: httpx.AsyncClient, api_service: Service) -> None:
    await _post(http_client, "bad", {"role": "user", "content": "first"})
    before = await _end(api_service, "bad")
    bad = [*TURN[:2], {"role": "tool", "content": "answers nothing"}, TURN[3]]
    response = await _post(http_client, "bad", bad)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "[2].tool_call_id"
    response = await _post(http_client, "bad", [TURN[0], 7])
    assert (response.status_code, response.json()["error"]["field"]) == (422, "[1]")
    response = await _post(http_client, "bad", [])
    assert (response.status_code, response.json()["error"]["code"]) == (422, "empty_payload")
    assert await _end(api_service, "bad") == before


async def test_a_repeated_list_answers_the_first_append(http_client: httpx.AsyncClient, api_service: Service) -> None:
    first = await _post(http_client, "again", TURN, **{"Idempotency-Key": "same"})
    assert first.status_code == 202, first.text
    end = await _end(api_service, "again")
    again = await _post(http_client, "again", TURN, **{"Idempotency-Key": "same"})
    assert (again.status_code, again.json()) == (202, first.json())
    # the first append is found in the read models too (not only in this process's memory)
    await _transcript(http_client, "again", first.json()["offset"])
    for other in (TURN[:3], [*TURN[:3], {"role": "assistant", "content": "something else"}]):
        reused = await _post(http_client, "again", other, **{"Idempotency-Key": "same"})
        assert (reused.status_code, reused.json()["error"]["code"]) == (409, "idempotency_key_reused")
    single = await _post(http_client, "again", TURN[0], **{"Idempotency-Key": "same"})  # a list's first message alone
    assert single.status_code == 409, single.text
    assert await _end(api_service, "again") == end


async def test_a_key_that_looks_like_a_batch_messages_id_is_refused_before_anything_is_appended(
    http_client: httpx.AsyncClient, api_service: Service
) -> None:
    """A batch under key ``k`` gives its later messages the event ids ``k/1``, ``k/2``, …; a
    message appended earlier under the key ``k/1`` would take that id, and the projections keep
    the first event of a conversation with an id — the batch's second message, acknowledged, would
    never be stored. So keys ending in ``/<number>`` are refused, for messages and redactions."""
    await _post(http_client, "ids", {"role": "user", "content": "first"})
    before = await _end(api_service, "ids")
    for value in ("k/1", "order-7/0", "a/b/12"):
        refused = await _post(http_client, "ids", {"role": "user", "content": "hi"}, **{"Idempotency-Key": value})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert (error["code"], error["field"]) == ("invalid_idempotency_key", "Idempotency-Key")
        assert value in error["message"]
    redact = await http_client.post(f"{BASE}/ids/messages/m/redact", json={}, headers={**A, "Idempotency-Key": "r/2"})
    assert (redact.status_code, redact.json()["error"]["code"]) == (422, "invalid_idempotency_key")
    assert await _end(api_service, "ids") == before
    for value in ("k/one", "k/", "v1.2", "2024/12/01-a"):  # not a derived id's shape: accepted
        assert (
            await _post(http_client, "ids", {"role": "user", "content": value}, **{"Idempotency-Key": value})
        ).status_code == 202


async def test_unknown_formats_are_422_and_the_schema_lists_them(http_client: httpx.AsyncClient) -> None:
    response = await _post(http_client, "f", {"role": "user", "content": "x"}, "klingon")
    assert (response.status_code, response.json()["error"]["code"]) == (422, "unknown_format")
    assert response.json()["error"]["field"] == "format"
    schema = (await http_client.get("/openapi.json")).json()
    params = schema["paths"]["/v1/users/{user_id}/conversations/{conversation_id}/messages"]["post"]["parameters"]
    [fmt] = [p for p in params if p["name"] == "format"]
    assert fmt["schema"]["enum"] == ["chat_completions", "anthropic", "responses", "gemini"]
    assert fmt["schema"]["default"] == "chat_completions"


def _native(*messages: dict[str, Any], native_id: str | None = None) -> dict[str, Any]:
    return fake_native.payload(*messages, native_id=native_id)


async def test_a_native_payload_is_one_batch_and_its_id_makes_it_idempotent(
    http_client: httpx.AsyncClient, api_service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_native.register(monkeypatch)
    payload = _native(
        {"role": "user", "text": "q"},
        {"role": "assistant", "calls": ["c1"]},
        {"role": "tool", "text": "r", "answers": "c1"},
        native_id="msg_1",
    )
    first = await _post(http_client, "native", payload, "anthropic")
    assert first.status_code == 202, first.text
    assert set(first.json()) == {"messages", "partition", "offset"}
    end = await _end(api_service, "native")
    again = await _post(http_client, "native", payload, "anthropic")  # no key: the payload's own id
    assert (again.status_code, again.json()) == (202, first.json())
    assert await _end(api_service, "native") == end
    refused = await _post(http_client, "native", _native({"role": "nonsense"}), "anthropic")
    assert refused.status_code == 422
    assert (refused.json()["error"]["code"], refused.json()["error"]["field"]) == ("unknown_role", "messages[0].role")
    invalid = await _post(
        http_client,
        "native",
        _native({"role": "user", "text": "q"}, {"role": "assistant", "calls": ["c9"], "bad": True}),
        "anthropic",
    )
    assert (invalid.status_code, invalid.json()["error"]["field"]) == (422, "messages[1].blocks[0].name")
    assert await _end(api_service, "native") == end


async def test_a_native_tool_result_must_answer_an_open_call(
    http_client: httpx.AsyncClient, api_service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The call may be open in the conversation — also when the projection has not applied it
    yet (the check waits for it) — or earlier in the payload; else 422 orphan_tool_result."""
    fake_native.register(monkeypatch)
    assert (await _post(http_client, "tools", TURN[:2])).status_code == 202  # call_1 open, maybe not projected yet
    answer = await _post(
        http_client, "tools", _native({"role": "tool", "text": "42", "answers": "call_1"}), "anthropic"
    )
    assert answer.status_code == 202, answer.text
    before = await _end(api_service, "tools")
    call_c2 = {"role": "assistant", "calls": ["c2"]}
    orphans = [
        (_native({"role": "tool", "text": "again", "answers": "call_1"}), 0),  # answered already
        (_native(call_c2, {"role": "tool", "text": "x", "answers": "c3"}), 1),
        (_native(call_c2, {"role": "user", "text": "new turn"}, {"role": "tool", "text": "late", "answers": "c2"}), 2),
    ]
    for payload, index in orphans:
        orphan = await _post(http_client, "tools", payload, "anthropic")
        assert orphan.status_code == 422, orphan.text
        assert (orphan.json()["error"]["code"], orphan.json()["error"]["field"]) == (
            "orphan_tool_result",
            f"messages[{index}]",
        )
    assert await _end(api_service, "tools") == before
    paired = _native({"role": "assistant", "calls": ["c4"]}, {"role": "tool", "text": "ok", "answers": "c4"})
    assert (await _post(http_client, "tools", paired, "anthropic")).status_code == 202


async def test_chat_completions_keeps_tolerating_a_stray_tool_message(http_client: httpx.AsyncClient) -> None:
    """Unchanged: a Chat Completions tool message answering nothing is stored (flagged by the
    projection, never served), not refused."""
    response = await _post(http_client, "stray", {"role": "tool", "tool_call_id": "nobody", "content": "x"})
    assert response.status_code == 202, response.text
