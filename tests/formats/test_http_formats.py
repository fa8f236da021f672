"""Every format over HTTP: the providers' documented payloads appended with ``?format=``, served
back in that format JSON-equal (signatures and encrypted reasoning byte-identical), served to
another provider without them, and rebuilt ``as_of`` byte for byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from query_api.http.routes_context import CACHEABLE_PREFIX_HEADER
from tests.formats.every_format import validate_with_sdk
from tests.test_api_in_memory import client

__all__ = ["client"]  # the fixture (the API over the in-memory read models, a projector beside it)

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
    client: httpx.AsyncClient, case: str
) -> None:
    fmt, model, payloads, expected, key = CASES[case]
    offset = None
    for payload in payloads:
        r = await client.post(f"{BASE}/c/messages", params={"format": fmt}, json=payload, headers=A)
        assert r.status_code == 202, r.text
        assert r.json()["messages"]
        offset = r.json()["offset"]
    assert offset is not None
    params = {"model": model, "budget_tokens": 100_000, "format": fmt}
    live = await client.get(f"{BASE}/c/context", params={**params, "min_offset": offset}, headers=A)
    assert live.status_code == 200, live.text
    body = live.json()
    assert body[key] == expected
    assert body["format"] == fmt
    assert body["dropped"] == []
    validate_with_sdk(fmt, body)
    again = await client.get(f"{BASE}/c/context", params=params, headers=A)
    assert int(again.headers[CACHEABLE_PREFIX_HEADER]) > 0  # the same context again: all of it repeats
    metrics = (await client.get("/metrics")).text
    assert f'convlog_context_cacheable_prefix_tokens_total{{format="{fmt}"}}' in metrics
    rebuilt = await client.get(f"{BASE}/c/context", params={**params, "as_of": offset}, headers=A)
    assert rebuilt.text == live.text
    # The same conversation for an OpenAI model: no reasoning blob of this provider, tool pairs kept.
    chat = (await client.get(f"{BASE}/c/context", params={"model": "gpt-4o", "budget_tokens": 100_000},
                             headers=A)).json()  # fmt: skip
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


async def test_a_payload_that_breaks_its_format_is_refused_whole_with_its_code(client: httpx.AsyncClient) -> None:
    r = await client.post(f"{BASE}/c/messages", params={"format": "anthropic"}, headers=A, json=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "x", "signature": "s"}]},
    ])  # fmt: skip
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "signature_on_non_thinking_block"
    assert r.json()["error"]["field"].endswith("content[0].signature")
    orphan = await client.post(f"{BASE}/c/messages", params={"format": "responses"}, headers=A,
                               json={"type": "function_call_output", "call_id": "nope", "output": "x"})  # fmt: skip
    assert orphan.status_code == 422
    assert orphan.json()["error"]["code"] == "orphan_tool_result"
    listed = await client.get(f"{BASE}/c/events", headers=A)
    assert listed.status_code == 404  # nothing of either was stored


@pytest.mark.parametrize(
    ("fmt", "payload", "field"),
    [
        ("anthropic", {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}]},
         "content[0].tool_use_id"),
        ("anthropic", [{"role": "user", "content": "q"},
                       {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope"}]}],
         "[1].content[0].tool_use_id"),
        ("responses", [{"role": "user", "content": "q"}, {"type": "function_call_output", "call_id": "nope",
                                                          "output": "x"}], "[1].call_id"),
        ("gemini", {"role": "user", "parts": [{"text": "q"}, {"functionResponse": {"name": "f", "response": {}}}]},
         "parts[1].functionResponse.name"),
        ("gemini", [{"role": "user", "parts": [{"function_response": {"id": "nope", "name": "f", "response": {}}}]}],
         "[0].parts[0].function_response.id"),
    ],
)  # fmt: skip
async def test_a_tool_result_answering_no_call_is_refused_at_its_own_path(
    client: httpx.AsyncClient, fmt: str, payload: object, field: str
) -> None:
    """The path is where the payload names the call, not the neutral message's index (``messages[0]``)."""
    r = await client.post(f"{BASE}/orphans/messages", params={"format": fmt}, headers=A, json=payload)
    assert r.status_code == 422, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["field"]) == ("orphan_tool_result", field)
