"""Token counts made when a context is read, for an encoding the projector does not store.

``CONVLOG_TOKEN_ENCODINGS`` names what the projector counts (``o200k_base`` by default: every
current OpenAI model). A row projected since then has no count in the others (NULL), so a
context for a model on one of them (gpt-4, gpt-3.5-turbo: ``cl100k_base``) counts the messages
it reads here, with the same ``len(encode_ordinary(text))`` of the same text the projector
counts (:func:`~projectors.tokens.messages.countable_text`, ``countable_reasoning``): the counts,
and so every trimming decision, are the ones stored counts give. Rows that have a stored count
keep using it.

Cached per process in an LRU keyed by ``(encoding, blake2b-128 digest of the text)``: the next
turn's context reads the same messages again, and hashing a text costs a small fraction of
counting it. The key holds a digest, never the text, so the memory is bounded by the number of
entries (``ENTRIES`` of about 200 bytes each: ~13 MB), whatever size the messages are. The
digest of the content, not the message's identity, is the key: the same (conversation, seq)
holds different text in another database or after an erase.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from events.blocks import Block
from projectors.tokens.encodings import text_counter
from projectors.tokens.messages import countable_reasoning, countable_text

__all__ = ["ENTRIES", "AtReadCounts", "count_at_read", "message_counts_at_read"]

ENTRIES: Final = 1 << 16


class AtReadCounts:
    """An LRU of text counts keyed by encoding and digest, ``entries`` at most. Thread-safe;
    ``hits`` and ``misses`` say how often it counted."""

    def __init__(self, entries: int = ENTRIES) -> None:
        self.entries = entries
        self.hits = self.misses = 0
        self._counts: OrderedDict[tuple[str, bytes], int] = OrderedDict()
        self._counters: dict[str, Callable[[str], int]] = {}
        self._lock = threading.Lock()

    def count(self, text: str, encoding: str) -> int:
        """Tokens of ``text`` in ``encoding``, as :func:`~projectors.tokens.text_counter` counts them."""
        if not text:  # most messages carry no reasoning
            return 0
        # surrogatepass: a lone surrogate is hashed as it is (the count replaces it, as tiktoken does)
        key = (encoding, hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest())
        with self._lock:
            found = self._counts.get(key)
            if found is not None:
                self._counts.move_to_end(key)
                self.hits += 1
                return found
            counter = self._counters.get(encoding)
        if counter is None:
            counter = text_counter(encoding)  # raises for an unknown encoding
        tokens = counter(text)  # outside the lock: counting a long text takes a while
        with self._lock:
            self._counters[encoding] = counter
            self._counts[key] = tokens
            self.misses += 1
            if len(self._counts) > self.entries:
                self._counts.popitem(last=False)
        return tokens


_shared = AtReadCounts()
count_at_read = _shared.count
"""The process's :class:`AtReadCounts`: the query API's reads count with it."""


def message_counts_at_read(
    content: Any,
    tool_calls: Iterable[Mapping[str, Any]],
    blocks: Sequence[Block],
    reasoning_content: str | None,
    encoding: str,
) -> tuple[int, int]:
    """A message's ``(tokens, reasoning_tokens)`` in ``encoding``: the two counts the projector
    stores for the encodings it counts."""
    return (
        count_at_read(countable_text(content, tool_calls), encoding),
        count_at_read(countable_reasoning(blocks, reasoning_content), encoding),
    )
