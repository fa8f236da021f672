"""A made-up native format for tests of the append path, registered as ``anthropic`` (whose real
parser a colleague writes): ``{"id"?: native id, "messages": [{"role", "text"?, "calls"?: [call
ids], "answers"?: call id, "bad"?: true}]}``. ``bad`` makes a message the validator refuses (an
assistant tool call without a name); ``"role": "nonsense"`` is a NativeFormatError."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, cast

import pytest

from events.blocks import native_message
from events.errors import NativeFormatError
from events.event_types import Block, MessageAppended, Role, TextBlock, ToolCallBlock
from events.formats import Parsed, anthropic, registry

FORMAT = "anthropic"


def parse(payload: object, *, new_id: Callable[[], str]) -> Parsed:
    if not isinstance(payload, Mapping) or not isinstance(payload.get("messages"), list):
        raise NativeFormatError("must be an object with messages", field="messages", code="not_a_payload")
    out: list[MessageAppended] = []
    for i, m in enumerate(payload["messages"]):
        role = m.get("role")
        if role not in ("user", "assistant", "tool", "system"):
            raise NativeFormatError(f"unknown role {role!r}", field=f"messages[{i}].role", code="unknown_role")
        blocks: list[Block] = [TextBlock(m["text"])] if "text" in m else []
        name = "" if m.get("bad") else "lookup"
        blocks += [ToolCallBlock(call, name, "{}") for call in m.get("calls", ())]
        out.append(
            native_message(
                message_id=new_id(),
                role=cast("Role", role),
                blocks=blocks,
                api="anthropic",
                provider="anthropic",
                tool_call_id=m.get("answers"),
            )
        )
    return Parsed(tuple(out), native_id=payload.get("id"))


def register(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this module's parser the ``anthropic`` format's in the registry every producer built
    without one reads (the HTTP tests' service builds its own, before the test runs)."""
    fake = replace(anthropic.FORMAT, parse=parse)
    monkeypatch.setattr(registry, "FORMATS", registry.FORMATS.with_format(fake))


def payload(*messages: dict[str, Any], native_id: str | None = None) -> dict[str, Any]:
    return {"messages": list(messages), **({"id": native_id} if native_id else {})}
