"""Mistral, serve side: ``{"messages": [...]}`` from the neutral selection. Text is kept, tool
calls and results (ids made Mistral's), images and files are a placeholder, reasoning and other
formats' opaque blocks are dropped and reported."""

from __future__ import annotations

from typing import Any

from events.blocks import IMAGE_PLACEHOLDER, MediaBlock, OpaqueBlock, ReasoningBlock, TextBlock, ToolCallBlock
from events.formats.rendering import Dropped, Rendered, RenderRequest, Selected, stored_blocks
from tests.formats.toy_provider.rules import wire_id


def render(request: RenderRequest, /) -> Rendered:
    system = [b.text for m in request.system for b in stored_blocks(m) if isinstance(b, TextBlock) and b.text]
    messages: list[dict[str, Any]] = [{"role": "system", "content": text} for text in system]
    if request.summary:
        messages.append({"role": "system", "content": request.summary})
    dropped: list[Dropped] = []
    messages.extend(_message(selected, dropped) for selected in request.messages)
    return Rendered({"messages": messages}, tuple(dropped))


def _message(selected: Selected, dropped: list[Dropped]) -> dict[str, Any]:
    m = selected.message
    texts, calls = [], []
    for b in stored_blocks(m):
        if isinstance(b, TextBlock):
            texts.append(b.text)
        elif isinstance(b, MediaBlock):
            texts.append(IMAGE_PLACEHOLDER)
        elif isinstance(b, ToolCallBlock) and b.id in selected.call_ids:
            function = {"name": b.name, "arguments": b.arguments}
            calls.append({"id": wire_id(b.id), "type": "function", "function": function})
        elif isinstance(b, ReasoningBlock | OpaqueBlock):
            item = Dropped(m.message_id, "reasoning" if isinstance(b, ReasoningBlock) else "opaque", "other_provider")
            dropped.extend([item] if item not in dropped else [])
    out: dict[str, Any] = {"role": m.role, "content": "".join(texts)}
    if calls:
        out["tool_calls"] = calls
    if m.role == "tool":
        out["tool_call_id"] = wire_id(m.tool_call_id or "")
    return out
