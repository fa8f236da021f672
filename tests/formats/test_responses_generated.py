"""Generated conversations in the Responses format: they come back item for item, and every
context served from them (or from other formats' messages) passes the rule checker and the SDK."""

from __future__ import annotations

import itertools
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.blocks import OpaqueBlock, ReasoningBlock, TextBlock, ToolCallBlock, native_message
from events.event_types import ImagePart, MessageAppended, TextPart
from events.formats.rendering import RenderRequest, Selected
from events.formats.responses.render import render
from tests.formats.responses_support import RESPONSES, checked, parse_items, serve, stored

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
ident = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=4, max_size=10)


USER_PARTS = [
    {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "high"},
    {"type": "input_image", "image_url": "data:image/jpeg;base64,/9j/4AAQ", "detail": "auto"},
    {"type": "input_image", "file_id": "file-abc", "detail": "low"},
    {"type": "input_file", "file_url": "https://example.com/a.pdf"},
    {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"},
    {"type": "input_file", "file_id": "file-xyz", "filename": "b.txt"},
    {"type": "input_text", "text": "cached up to here", "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "30m"}},
]


@st.composite
def user_item(draw: st.DrawFn) -> dict[str, Any]:
    typed = draw(st.booleans())
    item: dict[str, Any] = {"type": "message"} if typed else {}
    item["role"] = "user"
    if draw(st.booleans()):
        item["content"] = draw(text)
    else:
        parts: list[dict[str, Any]] = [{"type": "input_text", "text": draw(text)}]
        parts += draw(st.lists(st.sampled_from(USER_PARTS), max_size=3))
        item["content"] = parts
    return item


@st.composite
def reasoning_item(draw: st.DrawFn) -> dict[str, Any]:
    item: dict[str, Any] = {"id": f"rs_{draw(ident)}", "type": "reasoning"}
    item["summary"] = [{"type": "summary_text", "text": t} for t in draw(st.lists(text, max_size=2))]
    encrypted = draw(st.sampled_from(["absent", "null", "blob"]))
    if encrypted != "absent":
        blob = draw(st.text("ABCDEFabcdef0123456789+/=_-", min_size=1, max_size=40))
        item["encrypted_content"] = None if encrypted == "null" else blob
    if draw(st.booleans()):
        item["content"] = [{"type": "reasoning_text", "text": t} for t in draw(st.lists(text, max_size=2))]
    if draw(st.booleans()):
        item["status"] = "completed"
    return item


@st.composite
def assistant_message(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.integers(0, 4)) == 0:  # the easy input shorthand
        return {"role": "assistant", "content": draw(text)}
    item: dict[str, Any] = {"id": f"msg_{draw(ident)}", "type": "message", "status": "completed"}
    item["role"] = "assistant"
    if draw(st.booleans()):
        item["phase"] = draw(st.sampled_from(["commentary", "final_answer"]))
    parts = [
        {"type": "output_text", "annotations": [], "text": t} for t in draw(st.lists(text, min_size=1, max_size=2))
    ]
    if draw(st.booleans()):
        parts.append({"type": "refusal", "refusal": draw(text)})
    item["content"] = parts
    return item


@st.composite
def conversation(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Turns: a user message, tool rounds (maybe reasoning, parallel calls, their outputs in
    any order), maybe a server tool item, then maybe reasoning and an answer."""
    calls = (f"call_{i}" for i in itertools.count())
    items: list[dict[str, Any]] = []
    if draw(st.booleans()):
        items.append({"role": draw(st.sampled_from(["system", "developer"])), "content": draw(text)})
    for _ in range(draw(st.integers(1, 3))):
        items.append(draw(user_item()))
        for _ in range(draw(st.integers(0, 2))):
            if draw(st.booleans()):
                items.append(draw(reasoning_item()))
            ids = [next(calls) for _ in range(draw(st.integers(1, 3)))]
            for call_id in ids:
                call = {"type": "function_call", "call_id": call_id, "name": "f", "arguments": json.dumps(draw(text))}
                if draw(st.booleans()):
                    call = {"id": f"fc_{draw(ident)}", **call, "status": "completed"}
                items.append(call)
            for call_id in draw(st.permutations(ids)):
                output: Any = draw(text) if draw(st.booleans()) else [{"type": "input_text", "text": draw(text)}]
                if isinstance(output, list) and draw(st.booleans()):
                    output.append(USER_PARTS[0])
                items.append({"type": "function_call_output", "call_id": call_id, "output": output})
        if draw(st.booleans()):
            items.append(
                {
                    "type": "web_search_call",
                    "id": f"ws_{draw(ident)}",
                    "status": "completed",
                    "action": {"type": "search", "query": draw(text)},
                }
            )
        if draw(st.booleans()):
            if draw(st.booleans()):
                items.append(draw(reasoning_item()))
            items.append(draw(assistant_message()))
    return items


@SETTINGS
@given(conversation())
def test_a_generated_conversation_comes_back_item_for_item(items: list[dict[str, Any]]) -> None:
    rendered = serve(parse_items(items))
    system = [i["content"] for i in items if i.get("role") in ("system", "developer")]
    assert rendered.fragment == {**({"instructions": system[0]} if system else {}), "input": items[len(system) :]}
    assert rendered.dropped == ()


@SETTINGS
@given(conversation(), st.data())
def test_any_whole_turn_suffix_with_any_answered_calls_is_valid(
    items: list[dict[str, Any]], data: st.DataObject
) -> None:
    """The assembler serves a suffix of whole turns, and of each assistant message only the calls
    answered: whatever it picks, the fragment keeps the rules (reasoning dropped with its call)."""
    rows = [stored(m, i) for i, m in enumerate(parse_items(items))]
    starts = [i for i, r in enumerate(rows) if r.role == "user"]
    rows = rows[data.draw(st.sampled_from(starts)) :]
    chosen: list[Selected] = []
    served: set[str] = set()
    for row in rows:
        if row.role == "tool" and row.tool_call_id not in served:
            continue
        calls = [b.id for b in row.blocks if isinstance(b, ToolCallBlock)]
        keep = tuple(c for c in calls if data.draw(st.booleans()))
        served.update(keep)
        chosen.append(Selected(row, call_ids=keep, keep_images=data.draw(st.booleans())))
    checked(render(RenderRequest(system=(), summary=None, messages=tuple(chosen), target=RESPONSES)))


@st.composite
def foreign_conversation(draw: st.DrawFn) -> list[MessageAppended]:
    """Chat Completions and Anthropic-like messages: text, images, thinking, calls, results."""
    out: list[MessageAppended] = []
    counter = itertools.count()
    for _ in range(draw(st.integers(1, 3))):
        n = next(counter)
        if draw(st.booleans()):
            out.append(MessageAppended(f"u{n}", "user", draw(text)))
        else:
            out.append(MessageAppended(f"u{n}", "user", (TextPart(draw(text)), ImagePart("https://x.test/i.png"))))
        calls = [ToolCallBlock(f"toolu_{n}_{i}", "f", "{}") for i in range(draw(st.integers(0, 2)))]
        blocks = [ReasoningBlock(text=draw(text), signature="sig")] if draw(st.booleans()) else []
        blocks += [TextBlock(t) for t in draw(st.lists(text, max_size=2))] + calls
        if draw(st.booleans()):
            blocks.append(OpaqueBlock("anthropic", '{"type":"server_tool_use"}'))
        out.append(
            native_message(
                message_id=f"a{n}",
                role="assistant",
                blocks=blocks,
                api="anthropic",
                provider="anthropic",
                model="claude-x",
            )
        )
        for call in calls:
            result = [TextBlock(draw(text))] if draw(st.booleans()) else []
            out.append(
                native_message(
                    message_id=f"t{call.id}",
                    role="tool",
                    tool_call_id=call.id,
                    blocks=result,
                    api="anthropic",
                    is_error=draw(st.sampled_from([None, True])),
                )
            )
        if calls and draw(st.booleans()):
            out.append(MessageAppended(f"c{n}", "assistant", draw(text), reasoning_content="thoughts"))
    return out


@SETTINGS
@given(foreign_conversation())
def test_other_formats_conversations_serve_valid_responses_input(messages: list[MessageAppended]) -> None:
    rendered = serve(messages, summary="Summary: earlier")
    kinds = [i["type"] for i in rendered.fragment["input"]]
    assert "reasoning" not in kinds
    assert kinds.count("function_call") == sum(len(m.tool_calls) for m in messages)
    assert rendered.fragment["instructions"] == "Summary: earlier"
