"""The Anthropic Messages rules a request fragment must satisfy: :func:`violations` lists every breach.

The renderer (events/formats/anthropic/render.py) must never produce one; tests run this on
every fragment they render. The rules the append side (events/formats/anthropic/parse.py) applies
too are stated here once: the thinking block types, the thinking order, the tool_use id pattern.
Sources: the Messages API reference, the tool use and extended thinking guides, the prompt
caching guide (REFERENCES.md, "Provider formats").
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = [
    "CACHEABLE",
    "ID_CHARS",
    "MAX_BREAKPOINTS",
    "THINKING",
    "TOOL_USE_ID",
    "thinking_ok",
    "thinking_out_of_order",
    "violations",
]

MAX_BREAKPOINTS = 4
# Blocks a cache_control breakpoint may be put on (thinking blocks may not carry one).
CACHEABLE = frozenset({"text", "image", "document", "tool_use", "tool_result", "search_result"})
THINKING: Final = frozenset({"thinking", "redacted_thinking"})
"""The thinking block types (reasoning, bound to the model that made it)."""
ID_CHARS: Final = "A-Za-z0-9_-"
"""The characters of a tool_use id Anthropic takes (a regex character class body)."""
TOOL_USE_ID: Final = re.compile(rf"^[{ID_CHARS}]+$")


def thinking_out_of_order(kinds: Sequence[object], *, thinking_first: bool) -> int | None:
    """The index of the first block of one assistant message (its block types, in order; any
    :data:`THINKING` type counts as thinking) that breaks Anthropic's thinking order, or None.

    Thinking never comes after a tool_use (Anthropic refuses it). With ``thinking_first``, a
    message holding both also starts with thinking (the breach is then at 0). The strictness
    differs on purpose: the serve side asks for both (a context is a request Anthropic must
    take, and a message the renderer merged from two may break the second rule); the append
    side asks only for the first, as it always has — a record with a text before its thinking
    is still a faithful record of a response, and refusing it now would refuse payloads that
    were taken before (the renderer drops and reports such thinking, see ``settle_thinking``)."""
    if "tool_use" not in kinds:
        return None
    first_call = kinds.index("tool_use")
    after = next((j for j in range(first_call, len(kinds)) if kinds[j] in THINKING), None)
    if after is not None:
        return after
    if thinking_first and kinds[0] not in THINKING and any(k in THINKING for k in kinds):
        return 0
    return None


def thinking_ok(content: Sequence[Mapping[str, Any]]) -> bool:
    """No thinking after a tool_use, and a message with both starts with thinking."""
    return thinking_out_of_order([b.get("type") for b in content], thinking_first=True) is None


def violations(fragment: Mapping[str, Any]) -> list[str]:
    out = [f"unexpected key {key!r}" for key in fragment if key not in ("system", "messages")]
    out.extend(_system_rules(fragment))
    messages = fragment.get("messages")
    if not isinstance(messages, list):
        return [*out, "messages: must be a list"]
    if not messages:
        return out  # no question yet (a new or cleared chat): the app's new message goes here
    out.extend(_message_rules(messages))
    breakpoints = _count(fragment, "cache_control")
    if breakpoints > MAX_BREAKPOINTS:
        out.append(f"{breakpoints} cache_control breakpoints (at most {MAX_BREAKPOINTS})")
    return out


def _system_rules(fragment: Mapping[str, Any]) -> list[str]:
    if "system" not in fragment:
        return []
    system = fragment["system"]
    if not isinstance(system, list) or not system:
        return ["system: must be a non-empty list of text blocks when present"]
    return [
        f"system[{i}]: not a non-empty text block"
        for i, b in enumerate(system)
        if not (isinstance(b, Mapping) and b.get("type") == "text" and isinstance(b.get("text"), str) and b["text"])
    ]


def _content_blocks(content: object) -> list[Mapping[str, Any]] | None:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and content and all(isinstance(b, Mapping) for b in content):
        return content
    return None


def _message_rules(messages: Sequence[Any]) -> list[str]:
    out: list[str] = []
    pending: list[str] = []  # the tool_use ids of the previous assistant message
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        role = msg.get("role") if isinstance(msg, Mapping) else None
        if role not in ("user", "assistant"):
            out.append(f"{where}: role {role!r} (only user and assistant)")
            continue
        if i == 0 and role != "user":
            out.append(f"{where}: the first message is not a user message")
        if i > 0 and isinstance(messages[i - 1], Mapping) and messages[i - 1].get("role") == role:
            out.append(f"{where}: two {role} messages in a row (roles alternate)")
        blocks = _content_blocks(msg.get("content"))
        if blocks is None:
            out.append(f"{where}.content: not a string or a non-empty list of blocks")
            blocks = []
        out.extend(_block_rules(blocks, role, where))
        if role == "user":
            if pending or any(b.get("type") == "tool_result" for b in blocks):
                out.extend(_results_answer(blocks, pending, where))
            pending = []
            continue
        if pending:
            out.append(f"{where}: tool_use {pending} of messages[{i - 1}] not answered by the next user message")
        pending = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
        if not thinking_ok(blocks):
            out.append(f"{where}: thinking after a tool_use, or not first in a message with a tool_use")
    if pending:
        out.append(f"messages[{len(messages) - 1}]: tool_use {pending} never answered")
    return out


def _block_rules(blocks: Sequence[Mapping[str, Any]], role: str, where: str) -> list[str]:
    out: list[str] = []
    for j, b in enumerate(blocks):
        kind = b.get("type")
        if kind == "text" and "signature" not in b:  # the common block: one look (paths built on a find only)
            if not (isinstance(b.get("text"), str) and b["text"]):
                out.append(f"{where}.content[{j}]: empty text block")
            continue
        at = f"{where}.content[{j}]"
        if kind == "thinking" and not (isinstance(b.get("signature"), str) and b["signature"]):
            out.append(f"{at}: thinking block without its signature")
        if kind == "redacted_thinking" and not (isinstance(b.get("data"), str) and b["data"]):
            out.append(f"{at}: redacted_thinking without data")
        if kind not in THINKING and "signature" in b:
            out.append(f"{at}: signature on a {kind} block")
        if kind == "tool_use":
            if role != "assistant":
                out.append(f"{at}: tool_use in a user message")
            if not isinstance(b.get("input"), Mapping):
                out.append(f"{at}: tool_use input is not an object")
            if not (isinstance(b.get("id"), str) and TOOL_USE_ID.match(b["id"])):
                out.append(f"{at}: tool_use id does not match {TOOL_USE_ID.pattern}")
        if kind in THINKING and role != "assistant":
            out.append(f"{at}: {kind} in a user message")
        if kind == "tool_result" and role != "user":
            out.append(f"{at}: tool_result in an assistant message")
    return out


def _results_answer(blocks: Sequence[Mapping[str, Any]], pending: Sequence[str], where: str) -> list[str]:
    out: list[str] = []
    kinds = [b.get("type") for b in blocks]
    results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
    if any(k != "tool_result" for k in kinds[: len(results)]):
        out.append(f"{where}: tool_result blocks are not all first (before any other block)")
    if len(set(results)) != len(results):
        out.append(f"{where}: two tool_result blocks for one tool_use")
    out.extend(
        f"{where}: tool_result {call_id!r} answers no tool_use of the previous assistant message"
        for call_id in results
        if call_id not in pending
    )
    missing = [c for c in pending if c not in results]
    if missing:
        out.append(f"{where}: tool_use {missing} of the previous assistant message not answered here")
    return out


def _count(value: object, key: str) -> int:
    """How many objects at any depth of ``value`` have ``key``: its JSON has ``"key":`` once for
    each (inside a string the quotes would be escaped), counted in C rather than walked."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).count(f'"{key}":')
