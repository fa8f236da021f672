"""Shared by the cross-format tests: neutral conversations mixing every format, as the
projection stores them, and the providers' own request types to validate what is served."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from anthropic.types import MessageParam, TextBlockParam
from google.genai import types as genai_types
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseInputParam
from pydantic import TypeAdapter

from events.blocks import (
    Block,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    blocks_from_json,
    blocks_to_json,
    native_message,
    reasoning_text,
)
from events.event_types import MessageAppended, ToolCall
from projectors.row_values import content_json, tool_calls_json
from projectors.tokens import countable_text, image_parts, text_counter
from query_api.context_types import StoredMessage

count = text_counter("o200k_base")

# (format, model): the format a message came in and the model that made it.
SOURCES: tuple[tuple[str | None, str], ...] = (
    (None, "deepseek-v4"),
    ("anthropic", "claude-sonnet-4-5"),
    ("responses", "gpt-5"),
    ("gemini", "gemini-2.5-pro"),
)
TARGETS: tuple[tuple[str, str], ...] = (
    ("chat_completions", "gpt-4o"),
    ("responses", "gpt-5"),
    ("anthropic", "claude-sonnet-4-5"),
    ("anthropic", "claude-opus-4-1"),
    ("gemini", "gemini-2.5-pro"),
    ("gemini", "gemini-2.5-flash"),
)


def stored(msg: MessageAppended, seq: int) -> StoredMessage:
    """A message as the transcript row the projector writes reads back (blocks through their JSON column)."""
    content, calls = content_json(msg), tuple(tool_calls_json(msg) or ())
    reasoning = msg.reasoning_content if not msg.blocks else reasoning_text(msg.blocks)
    return StoredMessage(
        seq=seq,
        epoch=0,
        message_id=msg.message_id,
        role=msg.role,
        content=content,
        name=msg.name,
        tool_calls=calls,
        tool_call_id=msg.tool_call_id,
        reasoning_content=msg.reasoning_content,
        finish_reason=msg.finish_reason,
        tokens=count(countable_text(content, calls)),
        reasoning_tokens=count(reasoning) if reasoning else 0,
        image_count=image_parts(content),
        blocks=blocks_from_json(blocks_to_json(msg.blocks)),
        api=msg.api,
        provider=msg.provider,
        model=msg.model,
        is_error=msg.is_error,
        prompt_tokens=None if msg.usage is None else msg.usage.prompt_tokens,
    )


def _reasoning(api: str | None, n: int) -> Block:
    if api == "anthropic":
        return ReasoningBlock(text=f"THINK-{n}#", signature=f"SIG-{n}#")
    if api == "responses":
        return ReasoningBlock(summary=(f"THINK-{n}#",), encrypted_content=f"ENC-{n}#", item_id=f"rs_{n}")
    return ReasoningBlock(text=f"THINK-{n}#", signature=_b64(f"SIG-{n}#"))  # a Gemini thought with its signature


def _b64(text: str) -> str:
    """Gemini thought signatures are base64 (its SDK's types check)."""
    return base64.b64encode(text.encode()).decode()


@st.composite
def conversations(draw: st.DrawFn) -> list[MessageAppended]:
    """A conversation whose assistant answers come from every format and model, with reasoning
    blobs, parallel tool calls (some unanswered), tool errors and orphan results."""
    out: list[MessageAppended] = []
    n = 0

    def next_id() -> str:
        nonlocal n
        n += 1
        return f"m{n}"

    for t in range(draw(st.integers(1, 5))):
        out.append(
            MessageAppended(message_id=next_id(), role="user", content=f"question {t} " * draw(st.integers(1, 8)))
        )
        for _ in range(draw(st.integers(0, 3))):
            api, model = draw(st.sampled_from(SOURCES))
            mid = next_id()
            calls = [
                ToolCallBlock(
                    f"call_{mid}_{k}",
                    f"tool_{k}",
                    json.dumps({"q": k}),
                    signature=_b64(f"SIG-{mid}-{k}#") if api == "gemini" and k == 0 else None,
                )
                for k in range(draw(st.integers(0, 2)))
            ]
            text = [TextBlock(f"answer {mid}")] if draw(st.booleans()) or not calls else []
            if api is None:
                out.append(
                    MessageAppended(
                        message_id=mid,
                        role="assistant",
                        content=text[0].text if text else None,
                        model=model,
                        tool_calls=tuple(ToolCall(c.id, c.name, c.arguments) for c in calls),
                        reasoning_content=f"DSR-{mid}#" if draw(st.booleans()) else None,
                    )
                )
            else:
                blocks: list[Block] = [_reasoning(api, int(mid[1:]))] if draw(st.booleans()) else []
                out.append(
                    native_message(
                        message_id=mid, role="assistant", blocks=[*blocks, *text, *calls], api=api, model=model
                    )
                )  # type: ignore[arg-type]
            for c in calls:
                if draw(st.integers(0, 5)) == 0:
                    continue  # never answered
                error = draw(st.sampled_from([None, False, True]))
                if api is None:
                    out.append(
                        MessageAppended(message_id=next_id(), role="tool", content=f"result {c.id}", tool_call_id=c.id)
                    )
                else:
                    out.append(
                        native_message(
                            message_id=next_id(),
                            role="tool",
                            blocks=[TextBlock(f"result {c.id}")],
                            api=api,
                            tool_call_id=c.id,
                            is_error=error,
                        )
                    )  # type: ignore[arg-type]
            if draw(st.integers(0, 9)) == 0:
                out.append(MessageAppended(message_id=next_id(), role="tool", content="orphan", tool_call_id="nope"))
    out.append(MessageAppended(message_id=next_id(), role="user", content="the question now"))
    return out


@cache
def _adapter(kind: str) -> TypeAdapter[Any]:
    """Built once per kind: a TypeAdapter of the SDK's unions is slow to construct."""
    kinds: dict[str, Any] = {
        "chat": list[ChatCompletionMessageParam],
        "responses": ResponseInputParam,
        "anthropic": list[MessageParam],
        "anthropic_system": list[TextBlockParam],
    }
    return TypeAdapter(kinds[kind])


def validate_with_sdk(fmt: str, fragment: Mapping[str, Any]) -> None:
    """The provider SDK's own request types accept the fragment (raises pydantic's ValidationError)."""
    if fmt == "chat_completions":
        _adapter("chat").validate_python(fragment["messages"])
    elif fmt == "responses":
        _adapter("responses").validate_python(fragment["input"])
    elif fmt == "anthropic":
        _adapter("anthropic").validate_python(fragment["messages"])
        _adapter("anthropic_system").validate_python(fragment.get("system", []))
    elif fmt == "gemini":
        for content in fragment["contents"]:
            genai_types.Content.model_validate(content)
        if "system_instruction" in fragment:
            genai_types.Content.model_validate(fragment["system_instruction"])
    else:
        raise AssertionError(fmt)


def secrets_of(m: StoredMessage) -> Sequence[str]:
    """The reasoning strings of ``m`` no other provider (or model, where bound) may ever see."""
    out: list[str] = []
    for b in m.blocks:
        if isinstance(b, ReasoningBlock):
            out += [s for s in (b.text, b.signature, b.encrypted_content, b.redacted_data, *(b.summary or ())) if s]
    return out
