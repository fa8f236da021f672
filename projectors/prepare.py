"""The CPU-bound part of a batch done before its transaction: decode, and count the tokens of
its messages' texts.

The projector prepares batch N+1 while batch N's transaction waits on Postgres (the runner
overlaps them): on a 2-core machine Postgres' work for one batch and Python's for the next then
run side by side instead of one after the other. Preparing is pure and works in chunks that
yield to the event loop, so the transaction in flight is served between them.

The counts are a cache keyed by text, made for the encodings the batch writer asked for before:
a text counted ahead is answered from it, any other is counted as it would have been. So what
is stored never depends on whether (or how well) a batch was prepared — only how fast it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from events.blocks import reasoning_text
from events.codec import EventCodec
from events.event_types import MessageAppended
from events.log import LogRecord
from projectors import tokens
from projectors.fold import Decoded, decode_batch, decode_one
from projectors.row_values import content_json, tool_calls_json
from projectors.rows import TokenCounting

# Records per chunk: ~2 ms of decoding, the longest the transaction in flight waits for the loop.
CHUNK = 128


@dataclass(frozen=True, slots=True)
class PreparedBatch:
    """A batch's records decoded (one :class:`Decoded` per record, in order), and token counts
    of its texts per encoding (``encoding -> text -> tokens``)."""

    decoded: list[Decoded]
    counts: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def only(self, records: Sequence[LogRecord]) -> PreparedBatch:
        """The part of the batch holding ``records`` (a subsequence of its records)."""
        if len(records) == len(self.decoded):
            return self
        kept = {id(r) for r in records}
        return PreparedBatch([d for d in self.decoded if id(d.record) in kept], self.counts)


class AheadCounter:
    """Wraps the store's counter: learns which encodings the batch writer counts, counts a
    batch's texts in them ahead of its transaction, and answers the writer from those counts."""

    def __init__(self, counter: TokenCounting) -> None:
        self._counter = counter
        self._encodings: dict[str, None] = {}  # in the order first asked for

    @property
    def encodings(self) -> tuple[str, ...]:
        return self._counter.encodings

    def count_many(self, texts: Sequence[str], encoding: str) -> list[int]:
        self._encodings.setdefault(encoding)
        return self._counter.count_many(texts, encoding)

    def answering(self, counts: Mapping[str, Mapping[str, int]]) -> TokenCounting:
        """A counter answering from ``counts`` where it can."""
        return _Answering(self, counts) if counts else self

    async def count_ahead(self, texts: Sequence[str]) -> dict[str, dict[str, int]]:
        unique = list(dict.fromkeys(t for t in texts if t))
        counts: dict[str, dict[str, int]] = {}
        for encoding in list(self._encodings):
            known = counts[encoding] = {}
            for start in range(0, len(unique), CHUNK):
                chunk = unique[start : start + CHUNK]
                known.update(zip(chunk, self._counter.count_many(chunk, encoding), strict=True))
                await asyncio.sleep(0)
        return counts


class _Answering:
    def __init__(self, ahead: AheadCounter, counts: Mapping[str, Mapping[str, int]]) -> None:
        self._ahead = ahead
        self._counts = counts

    @property
    def encodings(self) -> tuple[str, ...]:
        return self._ahead.encodings

    def count_many(self, texts: Sequence[str], encoding: str) -> list[int]:
        known = self._counts.get(encoding)
        if not known:
            return self._ahead.count_many(texts, encoding)
        missing = [t for t in texts if t not in known]
        if not missing:
            return [known[t] for t in texts]
        counted = dict(zip(missing, self._ahead.count_many(missing, encoding), strict=True))
        return [known[t] if t in known else counted[t] for t in texts]


def message_texts(decoded: Sequence[Decoded]) -> list[str]:
    """The texts of the decoded messages that the transcript's counts count: as
    :func:`projectors.row_values.countable_text` and :func:`~projectors.row_values.countable_reasoning`
    read them from the rows the fold makes of these messages."""
    texts: list[str] = []
    for d in decoded:
        body = d.event.body if d.event is not None else None
        if isinstance(body, MessageAppended):
            texts.append(tokens.countable_text(content_json(body), tool_calls_json(body) or ()))
            reasoning = reasoning_text(body.blocks) if body.blocks else body.reasoning_content
            if reasoning:
                texts.append(reasoning)
    return texts


async def with_new_keys(decoded: list[Decoded], *, codec: EventCodec, max_event_bytes: int) -> list[Decoded]:
    """``decoded`` with the records sealed under a key this process did not know yet decoded
    again after one refresh of the key store: another process (an API instance, a foreign
    producer through the key route) creates a key before it appends the first record sealed
    with it, so a refresh finds it; still unknown after it, a record is a dead letter."""
    keys = codec.keys
    if keys is None or not any(d.poison is not None and d.poison.error_code == "unknown_key" for d in decoded):
        return decoded
    await keys.refresh()
    return [
        decode_one(d.record, codec=codec, max_event_bytes=max_event_bytes)
        if d.poison is not None and d.poison.error_code == "unknown_key"
        else d
        for d in decoded
    ]


async def prepare_batch(
    records: Sequence[LogRecord], *, codec: EventCodec, max_event_bytes: int, counter: AheadCounter
) -> PreparedBatch:
    decoded: list[Decoded] = []
    for start in range(0, len(records), CHUNK):
        decoded.extend(decode_batch(records[start : start + CHUNK], codec=codec, max_event_bytes=max_event_bytes))
        await asyncio.sleep(0)
    decoded = await with_new_keys(decoded, codec=codec, max_event_bytes=max_event_bytes)
    return PreparedBatch(decoded, await counter.count_ahead(message_texts(decoded)))
