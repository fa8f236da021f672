"""What the format-neutral code must know of Chat Completions (:class:`~events.formats.provider.Traits`)."""

from __future__ import annotations

from typing import Final

from events.formats.provider import Traits

__all__ = ["TRAITS"]

# No native reasoning or opaque block has a place in it: DeepSeek's reasoning_content (appended
# in this format) is served by the request's reasoning policy. A payload is a message or a list
# of them: each item is one message. OpenAI's prompt cache is routed by prompt_cache_key.
TRAITS: Final = Traits(reasoning_by_policy=True, messages_are_items=True, prompt_cache_key=True)
