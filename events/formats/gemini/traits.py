"""What the format-neutral code must know of Gemini ``generateContent`` (:class:`~events.formats.provider.Traits`),
and what a context in another format lists of a Gemini message: :func:`signatures_left_out`."""

from __future__ import annotations

import json
from typing import Final

from events.blocks import TextBlock, ToolCallBlock
from events.formats.provider import Traits
from events.formats.rendering import Dropped, Rendered, RenderRequest
from events.formats.stored import StoredMessage

__all__ = ["TRAITS", "signatures_left_out"]


def signatures_left_out(request: RenderRequest, rendered: Rendered) -> Rendered:
    """``rendered`` with every message listed whose Gemini thought signatures (on its call and
    text parts: a thought's own are reasoning, listed by the renderer) it has no place for —
    every format but Gemini's — so no blob a provider needs back disappears silently."""
    if request.target.format == "gemini":
        return rendered
    listed = {(d.message_id, d.what) for d in rendered.dropped}
    extra: list[Dropped] = []
    for selected in request.messages:
        message = selected.message
        if message.api == "gemini" and (message.message_id, "signature") not in listed and _signed(message):
            extra.append(Dropped(message.message_id, "signature", "other_provider"))
    return Rendered(rendered.fragment, (*rendered.dropped, *extra)) if extra else rendered


def _signed(message: StoredMessage) -> bool:
    for block in message.blocks:
        if isinstance(block, ToolCallBlock) and block.signature:
            return True
        if isinstance(block, TextBlock) and block.extra and "thoughtSignature" in json.loads(block.extra):
            return True
    return False


TRAITS: Final = Traits(
    # Thought signatures are bound to the model that made them.
    model_bound_reasoning=True,
    # Measured by bench/estimate_error.py (query_api/estimates.py): the ratio is at most 1.06
    # (a median 0.60: gpt-4o's per-message overheads over-count short prompts).
    estimate_factor=1.0,
    listed_elsewhere=signatures_left_out,
)
