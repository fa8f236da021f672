"""Helpers for the Anthropic format tests: stored messages from parsed ones, selections, SDK checks."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pydantic
from anthropic.types import MessageParam, TextBlockParam

from events.event_types import MessageAppended, ToolCallBlock
from events.formats.anthropic.parse import parse
from events.formats.anthropic.render import render
from events.formats.anthropic.rules import violations
from events.formats.rendering import Rendered, RenderRequest, Selected, Target
from query_api.context_types import StoredMessage
from tests.formats.every_format import stored  # noqa: F401 -- re-exported for the tests of this format

_MESSAGES = pydantic.TypeAdapter(list[MessageParam])
_SYSTEM = pydantic.TypeAdapter(list[TextBlockParam])


def ids(prefix: str = "m") -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"{prefix}{next(counter)}"


def parse_all(payloads: Iterable[object]) -> list[MessageAppended]:
    new_id = ids()
    return [m for p in payloads for m in parse(p, new_id=new_id).messages]


def select(messages: Sequence[StoredMessage], *, keep_images: bool = True) -> tuple[Selected, ...]:
    """Every message, serving every tool call that a later tool message answers."""
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    out = []
    for m in messages:
        calls = tuple(b.id for b in m.blocks if isinstance(b, ToolCallBlock) and b.id in answered)
        if not m.blocks:
            calls = tuple(c["id"] for c in m.tool_calls if c["id"] in answered)
        out.append(Selected(m, call_ids=calls, keep_images=keep_images))
    return tuple(out)


def render_checked(
    messages: Sequence[StoredMessage],
    *,
    model: str,
    system: Sequence[StoredMessage] = (),
    summary: str | None = None,
    cache: bool = False,
    keep_images: bool = True,
) -> Rendered:
    """Render, and check the fragment with the rule checker and the SDK's own param types."""
    target = Target(format="anthropic", model=model, cache=cache)
    rendered = render(RenderRequest(tuple(system), summary, select(messages, keep_images=keep_images), target))
    assert violations(rendered.fragment) == []
    sdk_valid(rendered.fragment)
    return rendered


def sdk_valid(fragment: Mapping[str, Any]) -> None:
    """Validate with anthropic's TypedDicts (their Iterable fields validate lazily: force them)."""
    _force(_MESSAGES.validate_python(fragment["messages"]))
    if "system" in fragment:
        _force(_SYSTEM.validate_python(fragment["system"]))


def _force(value: object) -> None:
    if isinstance(value, Mapping):
        for v in value.values():
            _force(v)
    elif isinstance(value, list | tuple):
        for v in value:
            _force(v)
    elif isinstance(value, Iterator):
        for v in list(value):
            _force(v)


def native_messages(payloads: Iterable[object]) -> list[dict[str, Any]]:
    """The MessageParams the payloads stand for, as a request sends them back."""
    out: list[dict[str, Any]] = []
    for p in payloads:
        for doc in p if isinstance(p, list) else [p]:
            assert isinstance(doc, dict)
            out.append({"role": doc["role"], "content": doc["content"]})
    return out
