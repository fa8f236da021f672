"""What to summarize next for a conversation, and the summary's deterministic identity.

Pure functions over what the read models hold for one conversation: the window's start, the
current summary and the messages between the two (turns that left the window that no summary
covers yet). The next summary folds the oldest of those turns — all of them, unless they are
more than one model call should read, in which case the oldest whole turns up to that size;
the next plan then takes the rest. Its watermark (``covers_through``) is the last message of
the last turn it folds, so consecutive summaries neither overlap nor leave a gap.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from events.keys import ConversationKey
from projectors.turns import split_turns
from summarizer.transcript import PendingMessage, render_turns

# Namespace of summary event ids (uuid5): any process derives the same id for the same watermark.
SUMMARY_NAMESPACE = uuid.UUID("5d3c6f0e-6c1b-4f43-9a55-2f0d3b1f6a10")


@dataclass(frozen=True, slots=True)
class PreviousSummary:
    summary_id: str
    text: str
    covers_through_seq: int


@dataclass(frozen=True, slots=True)
class SummaryInputs:
    key: ConversationKey
    epoch: int
    window_start: int | None  # seq of the window's first user message (None: no turn yet)
    previous: PreviousSummary | None  # the current epoch's latest summary
    pending: tuple[PendingMessage, ...]  # non-system messages after ``previous``, before the window
    complete: bool = True  # False: only the oldest pending messages were read (the last turn may be cut)
    withdrawn: int = 0  # summaries of the epoch withdrawn because a message they covered was redacted
    redacted: tuple[tuple[int, str], ...] = ()  # (seq, message_id) of redacted messages before the window


@dataclass(frozen=True, slots=True)
class SummaryJob:
    key: ConversationKey
    previous: str | None  # the running summary's text so far
    lines: tuple[str, ...]  # the turns to fold in, readable (summarizer.transcript)
    turns: int
    covers_through_message_id: str
    covers_through_seq: int
    generation: int = 0  # withdrawn summaries so far: a redo after a redaction gets an id of its own
    excluded: tuple[str, ...] = ()  # redacted messages up to the watermark: recorded as left out

    def event_id(self, prompt_version: str) -> str:
        return summary_event_id(self.key, self.covers_through_message_id, prompt_version, generation=self.generation)


def summary_event_id(
    key: ConversationKey, covers_through_message_id: str, prompt_version: str, *, generation: int = 0
) -> str:
    """The same (conversation, watermark, prompt version) always gives the same event id, so a
    retry, a redelivery or a second summarizer instance cannot record a second summary: the
    projections apply an event id once. ``generation`` counts the conversation's summaries
    withdrawn by redactions: the summary that replaces a withdrawn one, same watermark, is new."""
    name = f"{key}\n{covers_through_message_id}\n{prompt_version}" + (f"\n{generation}" if generation else "")
    return str(uuid.uuid5(SUMMARY_NAMESPACE, name))


def plan(inputs: SummaryInputs, *, max_input_tokens: int, count: Callable[[str], int]) -> SummaryJob | None:
    """The next summary to make, or None when every turn that left the window is covered."""
    if inputs.window_start is None:
        return None
    split = split_turns(m for m in inputs.pending if m.seq < inputs.window_start)
    turns = list(split.turns)
    if not inputs.complete and len(turns) > 1:
        turns = turns[:-1]  # it may go on past what was read: never set a watermark inside a turn
    if not turns:
        return None  # a preamble alone (a greeting) waits for the first turn to leave the window
    # The preamble belongs to no turn; it is folded in with the first turn (projectors.turns).
    turns[0] = (*split.preamble, *turns[0])
    taken: list[PendingMessage] = []
    lines: list[str] = []
    used = 0
    n = 0
    for turn in turns:
        turn_lines = render_turns(turn)
        cost = sum(count(line) for line in turn_lines)
        if n and used + cost > max_input_tokens:
            break  # the rest waits for the next summary (whole turns only)
        taken.extend(turn)
        lines.extend(turn_lines)
        used += cost
        n += 1
    last = taken[-1]
    return SummaryJob(
        key=inputs.key,
        previous=inputs.previous.text if inputs.previous else None,
        lines=tuple(lines),
        turns=n,
        covers_through_message_id=last.message_id,
        covers_through_seq=last.seq,
        generation=inputs.withdrawn,
        excluded=tuple(message_id for seq, message_id in inputs.redacted if seq <= last.seq),
    )
