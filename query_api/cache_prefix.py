"""The cacheable prefix: how many leading tokens of a context equal the previous context's.

Providers bill a repeated prompt prefix at a fraction of the price (OpenAI caches prompts of
1,024 tokens or more in 128-token steps, Anthropic up to 4 breakpoints, DeepSeek prefixes
automatically), so what the window and summary policy keeps stable is money. Rendering is a
pure function of the context's units (system prompts, the summary, each served message with
what of it is served), so two contexts render the same prefix as far as their units agree.

The previous context is remembered per instance (an LRU of the newest contexts served per
conversation, format and model): after a restart, or for a conversation another instance
served last, the first context reports ``None``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["PrefixMemory", "common_prefix_tokens"]

Units = Sequence[tuple[str, int]]


def common_prefix_tokens(previous: Units, current: Units) -> int:
    """Tokens of the leading units ``current`` shares with ``previous``."""
    total = 0
    for (a, _), (b, cost) in zip(previous, current, strict=False):
        if a != b:
            break
        total += cost
    return total


class PrefixMemory:
    """The units of the last context served per (conversation, format, model), bounded."""

    def __init__(self, *, capacity: int = 10_000) -> None:
        self._capacity = capacity
        self._last: OrderedDict[tuple[str, str, str], tuple[tuple[str, int], ...]] = OrderedDict()

    def served(self, key: tuple[str, str, str], units: Units) -> int | None:
        """Record ``units`` as the newest context for ``key``; the prefix it shares with the
        one before (None when none is known here)."""
        previous = self._last.pop(key, None)
        self._last[key] = tuple(units)
        if len(self._last) > self._capacity:
            self._last.popitem(last=False)
        return None if previous is None else common_prefix_tokens(previous, units)
