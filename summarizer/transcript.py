"""The turns a summary folds in, as short readable lines for the summary model.

Pure functions. What the model reads is what a person skimming the chat would read: who said
what, which tool was called with which arguments and what it answered — as plain
``key: value`` text, never raw JSON (tool payloads are noise to a summarizer and cost tokens).
Reasoning content never goes in (seed 004: it is the model's scratchpad, not the
conversation), nor do redacted, erased or flagged messages, nor tool calls an interrupted
stream never finished. System messages are served with every context, so they stay out too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from events.event_types import tool_calls_ran

MAX_TEXT_CHARS = 2000  # of one message's text
MAX_TOOL_CHARS = 300  # of one tool call's arguments or one tool result
USER_PREFIX = "User: "  # a user message's line: one line, its whitespace folded


@dataclass(frozen=True, slots=True)
class PendingMessage:
    """A transcript row of a turn that left the window and no summary covers yet."""

    seq: int
    message_id: str
    role: str
    content: Any  # a string, OpenAI content parts, or None
    tool_calls: tuple[dict[str, Any], ...] = ()  # OpenAI's nested format
    tool_call_id: str | None = None
    finish_reason: str | None = None
    usable: bool = True  # False: redacted, erased or flagged — never shown to the model


def render_turns(messages: Sequence[PendingMessage]) -> list[str]:
    """One line per message (or per tool call), in log order."""
    tool_names: dict[str, str] = {}
    lines: list[str] = []
    for m in messages:
        if not m.usable or m.role == "system":
            continue
        if m.role == "user":
            lines.append(USER_PREFIX + _clip(_text(m.content), MAX_TEXT_CHARS))
        elif m.role == "assistant":
            text = _text(m.content)
            if text:
                lines.append(f"Assistant: {_clip(text, MAX_TEXT_CHARS)}")
            if not tool_calls_ran(m.finish_reason):
                continue
            for call in m.tool_calls:
                fn = call.get("function", {})
                name = str(fn.get("name", "tool"))
                tool_names[str(call.get("id"))] = name
                lines.append(f"Assistant called {name}({_clip(readable(fn.get('arguments')), MAX_TOOL_CHARS)})")
        elif m.role == "tool":
            name = tool_names.get(m.tool_call_id or "", "a tool")
            lines.append(f"Result of {name}: {_clip(readable(m.content), MAX_TOOL_CHARS)}")
    return lines


def readable(payload: Any) -> str:
    """A tool payload as ``key: value`` text: JSON strings are parsed and flattened."""
    if isinstance(payload, list):  # content parts
        payload = _text(payload)
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except ValueError:
            return " ".join(payload.split())
    return _flatten(payload)


def _flatten(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_flatten(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "; ".join(_flatten(v) for v in value)
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return " ".join(str(value).split())


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return " ".join(content.split())
    parts = []
    for p in content:
        if p.get("type") == "text":
            parts.append(" ".join(str(p.get("text", "")).split()))
        elif p.get("type") == "image_url":
            parts.append("[image]")
    return " ".join(x for x in parts if x)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
