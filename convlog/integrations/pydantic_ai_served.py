"""convlog's served fragments -> Pydantic AI messages (no I/O here; saving: ``pydantic_ai_messages``).

A fragment (``anthropic``, ``responses`` or ``chat_completions``) back to ``ModelMessage``\\ s:
system text (the summary included) as ``SystemPromptPart``\\ s at the head of the first request,
each tool return named after the call it answers (the fragment keeps them together), a failed
one (Anthropic's ``is_error``) as a ``failed`` return, Anthropic thinking and OpenAI reasoning
with their signatures marked with their provider so Pydantic AI's model of that provider sends
them back. Every loaded message carries ``metadata[LOADED_KEY]``, so saving it again (an app
saving ``all_messages()``) stores nothing twice.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic_ai.messages import (
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)

from convlog.integrations.pydantic_ai_messages import ANTHROPIC, LOADED_KEY, OPENAI, REDACTED_THINKING_ID

__all__ = ["from_anthropic", "from_chat_completions", "from_responses"]


class _Builder:
    """Served messages, in order, into alternating requests and responses."""

    def __init__(self) -> None:
        self.messages: list[ModelMessage] = []
        self.request: list[ModelRequestPart] = []
        self.call_names: dict[str, str] = {}

    def system(self, text: str) -> None:
        self.request.append(SystemPromptPart(text))

    def user(self, content: str | list[UserContent]) -> None:
        self.request.append(UserPromptPart(content))

    def tool(self, call_id: str, text: str, *, is_error: bool = False) -> None:
        name = self.call_names.get(call_id, "")
        if not is_error:
            self.request.append(ToolReturnPart(name, text, tool_call_id=call_id))
            return
        # Stored as an OpenAI model reads it ({"error": ...}); Pydantic AI wraps a failed return
        # itself for models without an error flag, so the part holds what is inside.
        try:
            error = json.loads(text)["error"]
        except (ValueError, TypeError, KeyError):
            error = text
        self.request.append(ToolReturnPart(name, error, tool_call_id=call_id, outcome="failed"))

    def response(self, parts: list[ModelResponsePart], *, provider_name: str | None = None) -> None:
        self._flush()
        for p in parts:
            if isinstance(p, ToolCallPart):
                self.call_names[p.tool_call_id] = p.tool_name
        self.messages.append(ModelResponse(parts, provider_name=provider_name, metadata={LOADED_KEY: True}))

    def _flush(self) -> None:
        if self.request:
            self.messages.append(ModelRequest(self.request, metadata={LOADED_KEY: True}))
            self.request = []

    def done(self) -> list[ModelMessage]:
        self._flush()
        return self.messages


def _image(url: str) -> UserContent:
    if url.startswith("data:") and ";base64," in url:
        head, data = url[5:].split(";base64,", 1)
        return BinaryContent(base64.b64decode(data), media_type=head)
    return ImageUrl(url)


def _text_of(content: Any) -> str:
    """A tool result's or system message's content as text (a string, or text parts joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, Mapping))
    return "" if content is None else json.dumps(content)


def from_chat_completions(messages: Sequence[Mapping[str, Any]]) -> list[ModelMessage]:
    b = _Builder()
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if role in ("system", "developer"):
            b.system(_text_of(content))
        elif role == "user":
            b.user(_chat_user_content(content))
        elif role == "tool":
            b.tool(str(m["tool_call_id"]), _text_of(content))
        elif role == "assistant":
            parts: list[ModelResponsePart] = []
            if m.get("reasoning_content"):
                parts.append(ThinkingPart(str(m["reasoning_content"])))
            if content:
                parts.append(TextPart(_text_of(content)))
            for call in m.get("tool_calls") or ():
                fn = call["function"]
                parts.append(ToolCallPart(fn["name"], fn["arguments"], tool_call_id=call["id"]))
            b.response(parts)
    return b.done()


def _chat_user_content(content: Any) -> str | list[UserContent]:
    if isinstance(content, str):
        return content
    out: list[UserContent] = []
    for part in content or ():
        if part.get("type") == "image_url":
            out.append(_image(part["image_url"]["url"]))
        else:
            out.append(str(part.get("text", "")))
    return out


def from_responses(instructions: Any, items: Sequence[Mapping[str, Any]]) -> list[ModelMessage]:
    b = _Builder()
    if isinstance(instructions, str) and instructions:
        b.system(instructions)
    output: list[ModelResponsePart] = []
    signed = False

    def flush() -> None:
        nonlocal output, signed
        if output:
            b.response(output, provider_name=OPENAI if signed else None)
            output, signed = [], False

    for item in items:
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "reasoning":
            summaries = [str(s.get("text", "")) for s in item.get("summary") or ()] or [""]
            for i, text in enumerate(summaries):
                output.append(
                    ThinkingPart(
                        text,
                        id=item.get("id"),
                        provider_name=OPENAI,
                        signature=item.get("encrypted_content") if i == 0 else None,
                    )
                )
            signed = True
        elif kind == "function_call":
            output.append(
                ToolCallPart(
                    item["name"],
                    item["arguments"],
                    tool_call_id=item["call_id"],
                    id=item.get("id"),
                    provider_name=OPENAI if item.get("id") else None,
                )
            )
        elif kind == "message" and role == "assistant":
            text = _text_of(item.get("content"))
            output.append(TextPart(text, id=item.get("id"), provider_name=OPENAI if item.get("id") else None))
        else:
            flush()
            if kind == "function_call_output":
                b.tool(str(item["call_id"]), _text_of(item.get("output")))
            elif role in ("system", "developer"):
                b.system(_text_of(item.get("content")))
            elif role == "user":
                b.user(_responses_user_content(item.get("content")))
    flush()
    return b.done()


def _responses_user_content(content: Any) -> str | list[UserContent]:
    if isinstance(content, str):
        return content
    out: list[UserContent] = []
    for part in content or ():
        if part.get("type") == "input_image" and part.get("image_url"):
            out.append(_image(str(part["image_url"])))
        else:
            out.append(str(part.get("text", "")))
    return out[0] if len(out) == 1 and isinstance(out[0], str) else out


def from_anthropic(system: Any, messages: Sequence[Mapping[str, Any]]) -> list[ModelMessage]:
    b = _Builder()
    if isinstance(system, str) and system:
        b.system(system)
    for block in system if isinstance(system, list) else ():
        b.system(str(block.get("text", "")))
    for m in messages:
        content = m.get("content")
        blocks: list[Mapping[str, Any]] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else list(content or ())
        )
        if m.get("role") == "assistant":
            parts, provider = _anthropic_parts(blocks)
            b.response(parts, provider_name=provider)
            continue
        prompt: list[UserContent] = []
        for block in blocks:
            kind = block.get("type")
            if kind == "tool_result":
                b.tool(str(block["tool_use_id"]), _text_of(block.get("content")), is_error=bool(block.get("is_error")))
            elif kind == "image":
                source = block["source"]
                url = source.get("url") or f"data:{source['media_type']};base64,{source['data']}"
                prompt.append(_image(url))
            elif kind == "text":
                prompt.append(str(block["text"]))
        if prompt:
            b.user(prompt[0] if len(prompt) == 1 and isinstance(prompt[0], str) else prompt)
    return b.done()


def _anthropic_parts(blocks: Sequence[Mapping[str, Any]]) -> tuple[list[ModelResponsePart], str | None]:
    parts: list[ModelResponsePart] = []
    signed = False
    for block in blocks:
        kind = block.get("type")
        if kind == "thinking":
            parts.append(
                ThinkingPart(str(block.get("thinking", "")), signature=block.get("signature"), provider_name=ANTHROPIC)
            )
            signed = True
        elif kind == "redacted_thinking":
            parts.append(ThinkingPart("", id=REDACTED_THINKING_ID, signature=block["data"], provider_name=ANTHROPIC))
            signed = True
        elif kind == "text":
            parts.append(TextPart(str(block["text"])))
        elif kind == "tool_use":
            parts.append(ToolCallPart(block["name"], dict(block.get("input") or {}), tool_call_id=block["id"]))
    # Pydantic AI sends signed thinking back only to the provider named on the response.
    return parts, (ANTHROPIC if signed else None)
