"""What the fold decides about a conversation's context range, stored on its row.

Pure functions. The fold (projectors/state.py) keeps a conversation's current summary, the turn
count its epoch started from and its redacted questions in the conversation's state; from those
and the window these say where a context's non-system messages start and how many usable turns
that range holds. The store writes both on the conversation's row (projectors/rows.py), so every
reader — the context statement, the summarizer's, the in-memory tables and ``as_of`` — reads
what the fold decided and no reader restates a rule.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import NamedTuple

from projectors.turns import in_a_turn
from projectors.window import Window

__all__ = [
    "SummaryAt",
    "after_withdrawals",
    "context_start",
    "current_summary",
    "in_range",
    "turns_before",
    "usable_turns",
]


class SummaryAt(NamedTuple):
    """A summary whose text is kept, and the message it covers through: that message's seq and
    the turn number it is in (the number of questions up to it)."""

    seq: int
    epoch: int
    covers_seq: int
    covers_turn: int


def current_summary(kept: Iterable[SummaryAt], epoch: int) -> SummaryAt | None:
    """The summary contexts use: the ``epoch``'s latest one among ``kept`` (summaries whose text
    was neither withdrawn nor erased)."""
    return max((s for s in kept if s.epoch == epoch), key=lambda s: s.seq, default=None)


def after_withdrawals(
    summary: SummaryAt | None, kept: Iterable[SummaryAt], withdrawn: Collection[int], epoch: int
) -> SummaryAt | None:
    """The current summary once the summaries ``withdrawn`` (seqs) lost their text: ``summary``,
    unless it is one of them — then the ``epoch``'s latest of ``kept`` that is not."""
    if summary is None or summary.seq not in withdrawn:
        return summary
    return current_summary((s for s in kept if s.seq not in withdrawn), epoch)


def context_start(window_start: int | None, summary: SummaryAt | None) -> int:
    """Where a context's non-system messages start: with no summary, the whole current epoch
    (turns no summary covers stay); else the earliest of the window's start and the first
    message the summary does not cover."""
    if summary is None:
        return 0
    after = summary.covers_seq + 1
    return after if window_start is None else min(window_start, after)


def in_range(seq: int, epoch: int, role: str, *, start: int, current_epoch: int) -> bool:
    """Whether a transcript row is one of the context's non-system messages: of the current
    epoch, from ``start`` (:func:`context_start`) on (reads.py's ``_IN_RANGE`` in SQL)."""
    return seq >= start and epoch == current_epoch and in_a_turn(role)


def turns_before(window: Window, summary: SummaryAt | None, *, turn_count: int, turns_before_epoch: int) -> int:
    """The turns started before :func:`context_start` (counted as rows' ``turn`` numbers are): the
    epoch's start with no summary; before the window's first question the turns the window does
    not hold; after the summary's message the turn that message is in."""
    if summary is None:
        return turns_before_epoch
    if window.start_seq is not None and window.start_seq <= summary.covers_seq + 1:
        return turn_count - len(window.turn_starts)
    return summary.covers_turn


def usable_turns(turn_count: int, before: int, start: int, redacted_questions: Iterable[int]) -> int:
    """The turns a context may use from ``start`` on (``ContextInputs.usable_turns``): those
    started there (``before`` started earlier), less those whose question was redacted."""
    return turn_count - before - sum(1 for seq in redacted_questions if seq >= start)
