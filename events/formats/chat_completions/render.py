"""The Chat Completions format on the serve side: the ``messages`` array OpenAI (and DeepSeek,
and every OpenAI-compatible endpoint) takes, checked by :func:`events.formats.chat_completions.rules.violations`.

A message appended in another format is served as its Chat Completions view (the
``content``/``tool_calls`` stored beside its blocks): text, images in user messages, tool calls
and results. Its reasoning blocks and opaque blocks have no place here and are dropped (and
reported); ``reasoning_content`` (DeepSeek's, appended in this format) follows the request's
reasoning policy.
"""

from __future__ import annotations

from typing import Any

from events.blocks import OpaqueBlock, ReasoningBlock, drop_images
from events.formats.rendering import Dropped, Rendered, RenderRequest, Selected

__all__ = ["render", "served_message"]


def served_message(s: Selected) -> dict[str, Any]:
    """One stored message as Chat Completions takes it."""
    m = s.message
    message: dict[str, Any] = {"role": m.role, "content": m.content if s.keep_images else drop_images(m.content)}
    if m.name and m.role != "tool":  # Chat Completions takes no name on tool messages (the call carries it)
        message["name"] = m.name
    if s.call_ids:
        wanted = set(s.call_ids)
        message["tool_calls"] = [c for c in m.tool_calls if c["id"] in wanted]
    if m.role == "tool":
        message["tool_call_id"] = m.tool_call_id
    if s.include_reasoning and m.reasoning_content:
        message["reasoning_content"] = m.reasoning_content
    return message


def render(request: RenderRequest) -> Rendered:
    messages = [served_message(Selected(m, keep_images=False)) for m in request.system]
    if request.summary is not None:
        messages.append({"role": "system", "content": request.summary})
    dropped: list[Dropped] = []
    for s in request.messages:
        messages.append(served_message(s))
        for block in s.message.blocks:
            if isinstance(block, ReasoningBlock):
                dropped.append(Dropped(s.message.message_id, "reasoning", "other_provider"))
            elif isinstance(block, OpaqueBlock):
                dropped.append(Dropped(s.message.message_id, "opaque", "unsupported"))
    return Rendered({"messages": messages}, tuple(dropped))
