"""The summarizer's ports: the model that writes a summary, and the store it reads its inputs
and keeps its positions in. No driver here.

Adapters: :class:`summarizer.offline_model.OfflineSummaryModel` (deterministic, no network) and
:class:`summarizer.openai_model.OpenAISummaryModel` (any OpenAI-compatible endpoint), both run
through one contract suite (tests/contract/test_summary_model_contract.py);
:class:`pgstore.summaries.PostgresSummaryStore`. Summaries themselves are never written to a
store: they are events in the log, projected like any other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from events.keys import ConversationKey
from summarizer.plan import SummaryInputs, SummaryJob

__all__ = ["Draft", "SummaryModel", "SummaryStore"]


@dataclass(frozen=True, slots=True)
class Draft:
    text: str
    input_tokens: int | None = None  # as the provider reported them
    output_tokens: int | None = None


class SummaryModel(Protocol):
    """Turns a :class:`~summarizer.plan.SummaryJob` (the summary so far and the turns to fold in)
    into a :class:`Draft` of non-empty text. A model that cannot answer now raises
    :class:`~summarizer.errors.LLMUnavailableError` (retriable), one that never will for this
    request :class:`~summarizer.errors.LLMRejectedError`. The limit is the caller's to enforce."""

    @property
    def model(self) -> str:
        """The model name recorded in the event."""
        ...

    @property
    def prompt_version(self) -> str:
        """The prompt's version, recorded in the event and part of its id."""
        ...

    async def summarize(self, job: SummaryJob, *, max_tokens: int) -> Draft: ...


class SummaryStore(Protocol):
    """The summarizer's positions (per consumer name) and what it reads of the live read models."""

    @property
    def consumer(self) -> str:
        """Whose positions these are (one name per summarizer group)."""
        ...

    async def positions(
        self, partitions: Sequence[int], *, start_at: Mapping[int, int] | None = None
    ) -> tuple[dict[int, int], frozenset[int]]:
        """The next offset to look at per partition, and the partitions never read before. Those
        start at 0, or at ``start_at``, which is stored at once so that every member, and this
        one after a restart, goes on from the same place."""
        ...

    async def save_positions(self, positions: Mapping[int, int]) -> None:
        """Store positions; they never move back."""
        ...

    async def live_schema(self) -> str:
        """The live read-models version (a :class:`~projectors.errors.ProjectionError` if none)."""
        ...

    async def projection_positions(self, schema: str, partitions: Sequence[int]) -> dict[int, int]:
        """How far the read models in ``schema`` have applied each partition (0: not at all)."""
        ...

    async def summary_inputs(self, schema: str, key: ConversationKey, *, max_rows: int) -> SummaryInputs | None:
        """One conversation's summary inputs, read in one snapshot; None for one the read models
        do not know. At most ``max_rows`` pending messages (the oldest); ``complete`` says
        whether that was all of them."""
        ...
