"""Conversations with a marker in every content field, written as an app writes them: the title
and the conversation's metadata through the service's producer, the turns over HTTP — Chat
Completions (content, names, message metadata, tool call arguments, tool results, reasoning),
Anthropic (thinking and its signature, redacted thinking, a text block's unknown key: its
``extra``), Responses (a reasoning item's summary and encrypted content, an output part's
unknown key) — and, once the summarizer ran, a summary whose text the fake model made of the
writer's marker. Each payload is small: Postgres would compress a value near 2 kB (pglz), and a
compressed marker could hide from a scan."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx

from convlog.runtime.serve import Service
from events.keys import ConversationKey
from tests.fake_llm import FakeLLM
from tests.sealing.disk_scan import Markers

TURNS_PER_CONVERSATION = 3  # the window keeps 1 of at most 2: the first turns leave it, and are summarized


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def post(client: httpx.AsyncClient, token: str, key: ConversationKey, body: Any, fmt: str | None = None) -> int:
    """Appends ``body``; the offset of its (last) record."""
    params = {"format": fmt} if fmt else {}
    path = f"/v1/users/{key.user_id}/conversations/{key.conversation_id}/messages"
    response = await client.post(path, json=body, params=params, headers=headers(token))
    assert response.status_code == 202, response.text
    return int(response.json()["offset"])


def chat_turn(m: Markers, n: int) -> list[dict[str, Any]]:
    arguments = json.dumps({"q": m("ar")})
    call = {"id": f"call_{n}", "type": "function", "function": {"name": "lookup", "arguments": arguments}}
    return [
        {"role": "user", "content": f"q{n} {m('ct')}", "name": f"n{m('nm')}", "metadata": {"k": m("mv")}},
        {"role": "assistant", "content": None, "tool_calls": [call], "reasoning_content": m("rc"), "model": "gpt-4o"},
        {"role": "tool", "tool_call_id": f"call_{n}", "content": m("tr")},
        {"role": "assistant", "content": f"a{n} {m('an')}", "model": "gpt-4o", "finish_reason": "stop"},
    ]


def anthropic_turn(m: Markers, n: int) -> list[dict[str, Any]]:
    thinking = {"type": "thinking", "thinking": m("th"), "signature": m("sg")}
    return [
        {"role": "user", "content": [{"type": "text", "text": f"q{n} {m('bq')}", "x_note": m("ex")}]},
        {
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [thinking, {"type": "redacted_thinking", "data": m("rd")}, {"type": "text", "text": m("bt")}],
        },
    ]


def responses_turn(m: Markers, n: int) -> list[dict[str, Any]]:
    return [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"q{n} {m('rq')}"}]},
        {
            "type": "reasoning",
            "id": f"rs_{n}",
            "summary": [{"type": "summary_text", "text": m("rs")}],
            "encrypted_content": m("ec"),
        },
        {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{n}",
            "content": [{"type": "output_text", "text": m("ra"), "annotations": [], "x_part": m("px")}],
        },
    ]


async def write_user(
    service: Service, client: httpx.AsyncClient, token: str, keys: list[ConversationKey], m: Markers
) -> int:
    """Every conversation of ``keys`` gets a title, metadata and three turns in the three
    formats, every field marked; the offset of the last record."""
    last = 0
    for key in keys:
        await service.deps.producer.start_conversation(key, title=m("ti"), metadata={"topic": m("md")})
        last = await post(client, token, key, chat_turn(m, 1))
        last = await post(client, token, key, anthropic_turn(m, 2), "anthropic")
        last = await post(client, token, key, responses_turn(m, 3), "responses")
    return last


def summarize_with_markers(fake: FakeLLM, *writers: Markers) -> None:
    """The fake model's summary names the writer whose marker the request carries."""
    prefixes = re.compile("|".join(re.escape(w.prefix) for w in writers))

    def answer(body: dict[str, Any]) -> str:
        seen = prefixes.search(json.dumps(body))
        return f"Facts: {seen.group(0)}su" if seen else "Facts: none"

    fake.answer_for = answer  # type: ignore[method-assign]


async def summarized(client: httpx.AsyncClient, token: str, key: ConversationKey, m: Markers) -> None:
    """Waits (≤ 30 s) until the conversation's current summary is the fake model's, of ``m``."""
    path = f"/v1/users/{key.user_id}/conversations/{key.conversation_id}/summaries"
    async with asyncio.timeout(30):
        while True:
            answer = await client.get(path, headers=headers(token))
            assert answer.status_code in (200, 404), answer.text  # 404: not projected yet
            summaries = answer.json().get("summaries", [])
            if any(s["status"] == "current" and s.get("text") == f"Facts: {m('su')}" for s in summaries):
                return
            await asyncio.sleep(0.2)


async def caught_up(client: httpx.AsyncClient, token: str, key: ConversationKey, offset: int) -> None:
    params: dict[str, Any] = {"model": "gpt-4o", "budget_tokens": 100_000, "min_offset": offset}
    path = f"/v1/users/{key.user_id}/conversations/{key.conversation_id}/context"
    async with asyncio.timeout(30):
        while True:
            answer = await client.get(path, params=params, headers=headers(token))
            if answer.status_code == 200:
                return
            assert answer.status_code == 503, answer.text  # not caught up yet: ask again
