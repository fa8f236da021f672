"""Helpers of the Responses format tests: stored messages from parsed ones, and the SDK check."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import pydantic
from openai.types.responses import ResponseInputParam

from events.blocks import ToolCallBlock
from events.event_types import MessageAppended
from events.formats.rendering import Rendered, RenderRequest, Selected, Target
from events.formats.responses.parse import parse
from events.formats.responses.render import render
from events.formats.responses.rules import violations
from query_api.context_types import StoredMessage
from tests.formats.every_format import stored

# extra="forbid": a key the SDK's param types do not know is an error, not silently ignored.
_INPUT = pydantic.TypeAdapter(ResponseInputParam, config=pydantic.ConfigDict(extra="forbid"))
RESPONSES = Target(format="responses", model="gpt-5")


def ids(prefix: str = "m") -> Iterator[str]:
    return (f"{prefix}{i}" for i in itertools.count(1))


def parse_items(payload: object) -> list[MessageAppended]:
    counter = ids()
    return list(parse(payload, new_id=lambda: next(counter)).messages)


def selected(rows: Sequence[StoredMessage], *, keep_images: bool = True) -> tuple[Selected, ...]:
    """Every message, every call served (the tests' conversations answer them all)."""
    out = []
    for row in rows:
        calls = tuple(b.id for b in row.blocks if isinstance(b, ToolCallBlock)) or tuple(
            c["id"] for c in row.tool_calls
        )
        out.append(Selected(row, call_ids=calls, keep_images=keep_images))
    return tuple(out)


def serve(messages: Sequence[MessageAppended], *, target: Target = RESPONSES, summary: str | None = None) -> Rendered:
    rows = [stored(m, i + 1) for i, m in enumerate(messages)]
    system = tuple(r for r in rows if r.role == "system")
    rest = selected([r for r in rows if r.role != "system"])
    return checked(render(RenderRequest(system=system, summary=summary, messages=rest, target=target)))


def checked(rendered: Rendered) -> Rendered:
    """Every fragment a test renders: no rule broken, and the SDK's param types accept it."""
    assert violations(rendered.fragment) == []
    consume(_INPUT.validate_python(rendered.fragment["input"]))
    assert isinstance(rendered.fragment.get("instructions", ""), str)
    return rendered


def consume(value: Any) -> None:
    """pydantic validates ``Iterable`` fields lazily: walk everything so every part is checked."""
    if isinstance(value, dict):
        for v in value.values():
            consume(v)
    elif isinstance(value, str | bytes | int | float | bool) or value is None:
        return
    elif hasattr(value, "__iter__"):
        for v in value:
            consume(v)
