"""A folded history's decisions applied in memory — what the store writes, without Postgres.

The fold (projectors/fold.py, projectors/state.py) decides which rows and summaries a
redaction, an erasure or a withdrawal changes; the store writes those decisions with UPDATEs
(pgstore/writes.py), and this module applies the same decisions to the folded rows, so
``as_of`` (and any read model kept in memory) ends where the tables end. Both clear the fields
:data:`~projectors.changes.REDACTION_CLEARS` and :data:`~projectors.changes.ERASURE_CLEARS` name
(and empty :data:`~projectors.changes.CLEARS_TO_EMPTY`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from projectors.changes import CLEARS_TO_EMPTY, ERASURE_CLEARS, REDACTION_CLEARS, SummaryRow, TranscriptRow
from projectors.fold import BatchOutcome

_EMPTIED: dict[str, Any] = {f: {} for f in CLEARS_TO_EMPTY}
_REDACTED: dict[str, Any] = {**dict.fromkeys(REDACTION_CLEARS), **_EMPTIED}
_ERASED: dict[str, Any] = {**dict.fromkeys(ERASURE_CLEARS), **_EMPTIED}


@dataclass(frozen=True, slots=True)
class AppliedMessage:
    """A transcript row as the table holds it once every decision of the history is written."""

    row: TranscriptRow  # the fields a redaction or an erasure cleared are None ({} for metadata)
    original: TranscriptRow  # as appended: token counts are taken from it, as at projection time
    redacted: bool = False
    erased: bool = False


@dataclass(frozen=True, slots=True)
class AppliedHistory:
    """The rows of a folded history, per conversation and seq, with its decisions applied."""

    messages: dict[tuple[str, int], AppliedMessage]
    summaries: dict[tuple[str, int], SummaryRow]  # text None once withdrawn or erased


def apply_decisions(out: BatchOutcome) -> AppliedHistory:
    """Apply ``out``'s redactions, withdrawals and erasures to its rows (every decision clears
    fields or sets flags only, so their order does not matter — as in the store)."""
    messages = {(r.conversation_key, r.seq): AppliedMessage(r, r) for r in out.transcript}
    summaries = {(s.conversation_key, s.seq): s for s in out.summaries}
    by_id: dict[tuple[str, str], list[int]] = {}
    if out.redactions:  # a long history with many redactions: no scan of every row per redaction
        for r in out.transcript:
            by_id.setdefault((r.conversation_key, r.message_id), []).append(r.seq)
    for redaction in out.redactions:
        for seq in by_id.get((redaction.conversation_key, redaction.message_id), ()):
            at = (redaction.conversation_key, seq)
            if seq < redaction.before_seq and not (m := messages[at]).redacted:
                messages[at] = replace(m, row=replace(m.row, **_REDACTED), redacted=True)
    for withdrawal in out.withdrawals:
        at = (withdrawal.conversation_key, withdrawal.seq)
        summaries[at] = replace(summaries[at], text=None)
    # An erasure clears every earlier row of its conversation: only the latest one matters.
    erased_before: dict[str, int] = {}
    for erasure in out.erasures:
        key = erasure.conversation_key
        erased_before[key] = max(erased_before.get(key, 0), erasure.before_seq)
    if erased_before:
        for at, m in messages.items():
            if at[1] < erased_before.get(at[0], 0):
                messages[at] = replace(m, row=replace(m.row, **_ERASED), erased=True)
        for at, s in summaries.items():
            if at[1] < erased_before.get(at[0], 0):
                summaries[at] = replace(s, text=None)
    return AppliedHistory(messages, summaries)
