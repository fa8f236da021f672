"""What the format-neutral code must know of the OpenAI Responses API (:class:`~events.formats.provider.Traits`):
reasoning items go to OpenAI's models (to the one that made them when recorded), the prompt
cache reuses a token prefix and is routed by ``prompt_cache_key``, and its models count exactly
(no estimate factor)."""

from __future__ import annotations

from typing import Final

from events.formats.provider import Traits

__all__ = ["TRAITS"]

TRAITS: Final = Traits(prompt_cache_key=True)
