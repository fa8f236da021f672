"""Every format over HTTP: the providers' documented payloads appended with ``?format=``, served
back in that format JSON-equal (signatures and encrypted reasoning byte-identical), served to
another provider without them, and rebuilt ``as_of`` byte for byte."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from events.codec import default_codec
from events.embedded_log import EmbeddedEventLog
from events.event_types import Event, MessageAppended, ToolCall
from events.keys import ConversationKey
from query_api.http.routes_context import CACHEABLE_PREFIX_HEADER
from tests.formats.every_format import validate_with_sdk
from tests.test_api_in_memory import deps, in_memory_client

__all__ = ["deps", "in_memory_client"]  # the fixture (the API over the in-memory read models, a projector beside it)

A = {"Authorization": "Bearer token-a"}
BASE = "/v1/users/u1/conversations"
FIXTURES = Path(__file__).parent.parent / "fixtures" / "formats"


def _anthropic(name: str) -> tuple[str, list[Any], list[Any]]:
    doc = json.loads((FIXTURES / "anthropic" / name).read_text())
    expected = [{"role": p["role"], "content": p["content"]} for p in doc["payloads"]]
    return doc["model"], doc["payloads"], expected


def _responses(name: str) -> tuple[str, list[Any], list[Any]]:
    doc = json.loads((FIXTURES / "responses" / name).read_text())
    items = doc["items"]
    return "gpt-5", [items], [i for i in items if i.get("role") not in ("developer", "system")]


def _gemini(name: str) -> tuple[str, list[Any], list[Any]]:
    doc = json.loads((FIXTURES / "gemini" / name).read_text())
    # A bare Content names no model: convlog's "model" key says which made it (signatures are bound to it).
    payloads = [{**c, "model": doc["model"]} if c["role"] == "model" else c for c in doc["contents"]]
    return doc["model"], payloads, doc["contents"]


CASES = {
    "anthropic": ("anthropic", *_anthropic("extended_thinking_tools.json"), "messages"),
    "anthropic-parallel": ("anthropic", *_anthropic("parallel_tool_use.json"), "messages"),
    "responses": ("responses", *_responses("reasoning_function_calls.json"), "input"),
    "gemini": ("gemini", *_gemini("parallel_function_calls.json"), "contents"),
}


@pytest.mark.parametrize("case", CASES)
async def test_a_native_conversation_comes_back_as_it_was_and_as_of_rebuilds_it(
    in_memory_client: httpx.AsyncClient, case: str
) -> None:
    fmt, model, payloads, expected, key = CASES[case]
    offset = None
    for payload in payloads:
        r = await in_memory_client.post(f"{BASE}/c/messages", params={"format": fmt}, json=payload, headers=A)
        assert r.status_code == 202, r.text
        assert r.json()["messages"]
        offset = r.json()["offset"]
    assert offset is not None
    params = {"model": model, "budget_tokens": 100_000, "format": fmt}
    live = await in_memory_client.get(f"{BASE}/c/context", params={**params, "min_offset": offset}, headers=A)
    assert live.status_code == 200, live.text
    body = live.json()
    assert body[key] == expected
    assert body["format"] == fmt
    assert body["dropped"] == []
    validate_with_sdk(fmt, body)
    again = await in_memory_client.get(f"{BASE}/c/context", params=params, headers=A)
    assert int(again.headers[CACHEABLE_PREFIX_HEADER]) > 0  # the same context again: all of it repeats
    metrics = (await in_memory_client.get("/metrics")).text
    assert f'convlog_context_cacheable_prefix_tokens_total{{format="{fmt}"}}' in metrics
    rebuilt = await in_memory_client.get(f"{BASE}/c/context", params={**params, "as_of": offset}, headers=A)
    assert rebuilt.text == live.text
    # The same conversation for an OpenAI model: no reasoning blob of this provider, tool pairs kept.
    chat = (
        await in_memory_client.get(f"{BASE}/c/context", params={"model": "gpt-4o", "budget_tokens": 100_000}, headers=A)
    ).json()
    validate_with_sdk("chat_completions", chat)
    served = json.dumps(chat)
    for secret in _blobs(payloads):
        assert secret not in served
    assert any(m.get("tool_calls") for m in chat["messages"]) == any(m["role"] == "tool" for m in chat["messages"])


def _blobs(payload: Any) -> list[str]:
    """Every signature, redacted or encrypted reasoning string in a native payload."""
    found: list[str] = []
    if isinstance(payload, dict):
        for k, v in payload.items():
            if k in ("signature", "thoughtSignature", "encrypted_content", "data") and isinstance(v, str):
                found.append(v)
            else:
                found += _blobs(v)
    elif isinstance(payload, list):
        for v in payload:
            found += _blobs(v)
    return found


async def test_a_payload_that_breaks_its_format_is_refused_whole_with_its_code(
    in_memory_client: httpx.AsyncClient,
) -> None:
    r = await in_memory_client.post(
        f"{BASE}/c/messages",
        params={"format": "anthropic"},
        headers=A,
        json=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "x", "signature": "s"}]},
        ],
    )
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "signature_on_non_thinking_block"
    assert r.json()["error"]["field"].endswith("content[0].signature")
    orphan = await in_memory_client.post(
        f"{BASE}/c/messages",
        params={"format": "responses"},
        headers=A,
        json={"type": "function_call_output", "call_id": "nope", "output": "x"},
    )
    assert orphan.status_code == 422
    assert orphan.json()["error"]["code"] == "orphan_tool_result"
    listed = await in_memory_client.get(f"{BASE}/c/events", headers=A)
    assert listed.status_code == 404  # nothing of either was stored


# JSON texts parsers read two ways (issue 23, item 4): a key named twice in one object (the last
# wins in Python, so a duplicated role made a user message an assistant's) and bodies not in UTF-8.
_TWICE = {  # case: (format, text, the key named twice)
    "chat_completions": ("chat_completions", '{"role": "user", "content": "hi", "role": "assistant"}', "role"),
    "anthropic": ("anthropic", '{"role": "user", "content": "hi", "role": "assistant"}', "role"),
    "responses": ("responses", '{"type": "message", "role": "user", "content": "hi", "role": "developer"}', "role"),
    "gemini": ("gemini", '{"role": "user", "parts": [{"text": "hi"}], "role": "model"}', "role"),
    "anthropic tool_use_id": (
        "anthropic",
        '[{"role": "assistant", "content": [{"type": "tool_use", "id": "t1", '
        '"name": "f", "input": {}}]}, {"role": "user", "content": [{"type": "tool_result", '
        '"tool_use_id": "t1", "content": "x", "tool_use_id": "t2"}]}]',
        "tool_use_id",
    ),
    "responses call_id": (
        "responses",
        '[{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}, '
        '{"type": "function_call_output", "call_id": "c1", "output": "x", "call_id": "c2"}]',
        "call_id",
    ),
    "gemini name": (
        "gemini",
        '{"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}, "name": "g"}}]}',
        "name",
    ),
}


@pytest.mark.parametrize("case", _TWICE)
async def test_a_key_named_twice_is_refused_naming_it(in_memory_client: httpx.AsyncClient, case: str) -> None:
    fmt, text, key = _TWICE[case]
    r = await in_memory_client.post(
        f"{BASE}/c/messages", params={"format": fmt}, content=text, headers={**A, "Content-Type": "application/json"}
    )
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_json", "body")
    assert f"the key {key!r} appears twice" in error["message"]
    assert (await in_memory_client.get(f"{BASE}/c/events", headers=A)).status_code == 404  # nothing was stored


async def test_a_key_named_twice_inside_tool_arguments_is_refused(in_memory_client: httpx.AsyncClient) -> None:
    """Arguments are JSON text inside the JSON: served parsed to Anthropic and Gemini, as text
    to OpenAI, so they too must mean one thing."""
    twice = '{"path": "/tmp/x", "path": "/etc/passwd"}'
    chat = {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": twice}}],
    }
    responses = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": twice}
    for fmt, payload, field in (
        ("chat_completions", chat, "tool_calls[0].arguments"),
        ("responses", responses, "arguments"),
    ):
        r = await in_memory_client.post(f"{BASE}/c/messages", params={"format": fmt}, json=payload, headers=A)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["field"] == field
        assert "the key 'path' appears twice" in r.json()["error"]["message"]
    assert (await in_memory_client.get(f"{BASE}/c/events", headers=A)).status_code == 404


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32", "utf-16-le", "utf-32-be"])
async def test_a_body_not_in_utf8_is_refused(in_memory_client: httpx.AsyncClient, encoding: str) -> None:
    """RFC 8259 §8.1: JSON between systems is UTF-8 (BOM or not, UTF-16 and UTF-32 are refused)."""
    body = json.dumps({"role": "user", "content": "hi"}).encode(encoding)
    r = await in_memory_client.post(
        f"{BASE}/c/messages", content=body, headers={**A, "Content-Type": "application/json"}
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_json"
    assert "must be UTF-8" in r.json()["error"]["message"]
    bom = json.dumps({"role": "user", "content": "hi"}).encode("utf-8-sig")  # §8.1 lets a parser ignore it
    ok = await in_memory_client.post(
        f"{BASE}/c/messages", content=bom, headers={**A, "Content-Type": "application/json"}
    )
    assert ok.status_code == 202, ok.text


async def test_arguments_naming_a_key_twice_in_the_log_are_served_not_dead_lettered(
    in_memory_client: httpx.AsyncClient, log: EmbeddedEventLog
) -> None:
    """What the log already holds (another producer's record, or one appended before convlog
    refused it) is projected and served in every format, the last value counting as it does for
    OpenAI: a rebuild must not park the conversation."""
    key = ConversationKey("acme", "u1", "c")
    user = await in_memory_client.post(f"{BASE}/c/messages", json={"role": "user", "content": "hi"}, headers=A)
    assert user.status_code == 202, user.text
    call = ToolCall("c1", "f", '{"a": 1, "a": 2}')
    answer = MessageAppended(message_id="m2", role="assistant", content=None, tool_calls=(call,))
    event = Event("foreign-1", key, datetime.now(UTC), "another-producer", answer)
    await log.append(key=key.encode(), value=default_codec().encode(event))
    tool_result = {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    result = await in_memory_client.post(f"{BASE}/c/messages", json=tool_result, headers=A)
    assert result.status_code == 202, result.text
    served = {}
    for fmt, model in (
        ("chat_completions", "gpt-4o"),
        ("responses", "gpt-5"),
        ("anthropic", "claude-sonnet-4-5"),
        ("gemini", "gemini-2.5-pro"),
    ):
        params = {"model": model, "budget_tokens": 10_000, "format": fmt, "min_offset": result.json()["offset"]}
        r = await in_memory_client.get(f"{BASE}/c/context", params=params, headers=A)
        assert r.status_code == 200, r.text
        validate_with_sdk(fmt, r.json())
        served[fmt] = r.json()
    assert served["anthropic"]["messages"][1]["content"][0]["input"] == {"a": 2}
    assert served["gemini"]["contents"][1]["parts"][0]["functionCall"]["args"] == {"a": 2}


_OPENAI = ("gpt-5", "gpt-5-2025-08-07", "o3-mini", "openai/gpt-5-mini")
_OTHERS = (
    "claude-sonnet-4-5",
    "claude-opus-4-1-20250805",
    "anthropic/claude-3-7-sonnet",
    "gemini-2.5-pro",
    "gemini-2.5-flash",
    "google/gemini-2.0-flash",
)


async def test_encrypted_reasoning_appended_without_a_model_goes_to_openai_models_only(
    in_memory_client: httpx.AsyncClient,
) -> None:
    """Items appended without their Response (the Agents SDK's) record no model: their reasoning,
    encrypted by OpenAI, is still never served for another provider's model, in any format."""
    _, payloads, _ = _responses("reasoning_function_calls.json")
    r = await in_memory_client.post(f"{BASE}/c/messages", params={"format": "responses"}, json=payloads[0], headers=A)
    assert r.status_code == 202, r.text
    blobs = _blobs(payloads)
    assert blobs
    for fmt in ("responses", "anthropic", "gemini", "chat_completions"):
        for model in (*_OPENAI, *_OTHERS):
            params = {"model": model, "budget_tokens": 100_000, "format": fmt, "min_offset": r.json()["offset"]}
            served = await in_memory_client.get(f"{BASE}/c/context", params=params, headers=A)
            assert served.status_code == 200, served.text
            validate_with_sdk(fmt, served.json())
            kept = [blob in served.text for blob in blobs]
            if fmt == "responses" and model in _OPENAI:
                assert all(kept), model
            else:
                assert not any(kept), (fmt, model)
                assert {d["what"] for d in served.json()["dropped"]} == {"reasoning"}, (fmt, model)


@pytest.mark.parametrize(
    ("fmt", "payload", "field"),
    [
        (
            "anthropic",
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}]},
            "content[0].tool_use_id",
        ),
        (
            "anthropic",
            [
                {"role": "user", "content": "q"},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope"}]},
            ],
            "[1].content[0].tool_use_id",
        ),
        (
            "responses",
            [{"role": "user", "content": "q"}, {"type": "function_call_output", "call_id": "nope", "output": "x"}],
            "[1].call_id",
        ),
        (
            "gemini",
            {"role": "user", "parts": [{"text": "q"}, {"functionResponse": {"name": "f", "response": {}}}]},
            "parts[1].functionResponse.name",
        ),
        (
            "gemini",
            [{"role": "user", "parts": [{"function_response": {"id": "nope", "name": "f", "response": {}}}]}],
            "[0].parts[0].function_response.id",
        ),
    ],
)
async def test_a_tool_result_answering_no_call_is_refused_at_its_own_path(
    in_memory_client: httpx.AsyncClient, fmt: str, payload: object, field: str
) -> None:
    """The path is where the payload names the call, not the neutral message's index (``messages[0]``)."""
    r = await in_memory_client.post(f"{BASE}/orphans/messages", params={"format": fmt}, headers=A, json=payload)
    assert r.status_code == 422, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["field"]) == ("orphan_tool_result", field)
