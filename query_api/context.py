"""Context assembly: from stored messages to a messages array that is always valid.

Pure functions. Input: the conversation's system messages, its current summary and the
non-system messages of the current epoch from where the context starts (turns in the window
and turns no summary covers yet). Output: an OpenAI Chat Completions ``messages`` array and
its accounting, or :class:`ContextBudgetExceededError`.

What never reaches the array: redacted, erased and flagged messages; tool calls an
interrupted stream never finished; tool calls without their results and results without
their call; reasoning the request's policy leaves out; images older than ``image_turns``
turns (a text placeholder stands in). Trimming drops the oldest whole turns first, then —
inside an over-long current turn — its oldest whole tool groups, never its user message.
Every array is checked against the rules before it is returned.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from events.errors import ConvlogError
from events.formats.registry import FORMATS, FormatRegistry
from events.formats.rendering import Dropped, Rendered, RenderRequest, Selected, Target
from projectors.tokens import text_message_cost
from projectors.turns import split_turns
from query_api.context_editing import edit_turns, edits_of
from query_api.context_types import (
    Context,
    ContextBudgetExceededError,
    ContextRequest,
    ModelSpec,
    StoredMessage,
    StoredSummary,
)
from query_api.estimates import CALIBRATION_MESSAGES, Estimate, estimate_for
from query_api.selection import Costs, Count, Served, Turn, build_turn, usable
from query_api.unservable import checked_render, too_deep, violations

SUMMARY_HEADER = "Summary of the earlier conversation:\n"


class NeedOlderMessagesError(ConvlogError):
    """Raised by :func:`assemble` given only the newest messages when it cannot tell without
    the older ones. A signal to the reader (read the whole range and assemble again), caught
    where the partial read is made; kept an exception rather than a return value so that the
    callers that pass the whole range (``complete=True``, which never raises it) keep a plain
    :class:`Context` result."""

    code = "need_older_messages"


def assemble(
    *,
    system: Sequence[StoredMessage],
    summary: StoredSummary | None,
    messages: Sequence[StoredMessage],
    request: ContextRequest,
    spec: ModelSpec,
    count: Count,
    complete: bool = True,
    usable_turns: int | None = None,
    formats: FormatRegistry = FORMATS,
) -> Context:
    """The context for ``request``, in ``request.format`` (one of ``formats``); raises
    :class:`ContextBudgetExceededError` when even the system messages, the summary and the
    current turn's user message do not fit.

    ``complete=False`` says ``messages`` are only the newest of the range (a long history read
    for its tail): the result is the same as from the whole range as long as the budget cut
    inside them — else :class:`NeedOlderMessagesError` asks for the whole range.
    ``usable_turns`` is then the number of usable turns in the whole range, for
    ``dropped_turns``."""
    target = Target(request.format, request.model, request.reasoning, request.cache)
    costs = Costs(spec, count, target, formats)
    head = [Selected(m, keep_images=False) for m in system if usable(m) and m.content]
    fixed = spec.reply_priming + sum(costs(s) for s in head)
    summary_text = None if summary is None else SUMMARY_HEADER + summary.text
    if summary_text is not None:
        fixed += text_message_cost("system", summary_text, spec, count)
    turns = _edited_turns(messages, costs, request, fixed, complete=complete)
    budget = request.message_budget
    recent = {m.message_id for m in messages[-CALIBRATION_MESSAGES:]}
    estimate = estimate_for(
        spec,
        target,
        [s for t in turns for s in t.messages() if s.selected.message.message_id in recent],
        formats=formats,
    )
    available = budget if estimate is None else estimate.tokens_available(budget)
    if not complete and (not turns or (estimate is not None and len(messages) < CALIBRATION_MESSAGES)):
        # The newest usable question is older than what was read; or fewer rows were read than
        # calibration looks at (as_of, from the whole range, would see more of them).
        raise NeedOlderMessagesError
    kept, skip_groups = _fit_estimated(turns, fixed, available, estimate, budget)
    if not complete and len(kept) == len(turns) and skip_groups == 0:
        # Every turn read fits: older, unread ones might too. (Had one not fit, no older one
        # could stay — trimming never leaves a gap — so the tail is then the whole answer.)
        raise NeedOlderMessagesError
    served = [
        s for i, turn in enumerate(kept) for s in turn.messages(skip_groups=skip_groups if i == len(kept) - 1 else 0)
    ]
    rendered, kept_head, served, unservable = _Render(summary_text, target, formats).servable(
        head, kept, served, skip_groups
    )
    fixed -= sum(costs(s) for s in head if s not in kept_head)  # system messages left out
    head = kept_head
    total = fixed + sum(s.cost for s in served)
    return Context(
        token_count=total if estimate is None else estimate.scaled(total, margin=False),
        encoding=spec.encoding,
        dropped_turns=(len(turns) if complete or usable_turns is None else usable_turns) - len(kept),
        compressed=summary is not None,
        summary=summary,
        format=target.format,
        fragment=rendered.fragment,
        dropped=rendered.dropped + tuple(Dropped(m, "message", "unservable") for m in unservable),
        estimate=None if estimate is None else replace(estimate, raw_tokens=total),
        units=_units(head, summary, costs, fixed, served),
        edits=edits_of(served, estimate),
    )


def _turns(messages: Sequence[StoredMessage], costs: Costs, request: ContextRequest) -> list[Turn]:
    """The range's turns made valid, those whose question can be served."""
    raw_turns = split_turns(messages).turns  # a preamble (a greeting) cannot open a context: rule 2
    turns: list[Turn] = []
    for index, raw in enumerate(raw_turns):
        keep_images = index >= len(raw_turns) - request.image_turns
        turn = build_turn(raw, costs, keep_images=keep_images, reasoning=request.reasoning)
        if turn is not None:
            turns.append(turn)
    return turns


def _edited_turns(
    messages: Sequence[StoredMessage], costs: Costs, request: ContextRequest, fixed: int, *, complete: bool
) -> list[Turn]:
    """:func:`_turns` as the request's context editing serves them (query_api/context_editing.py)."""
    if not complete and request.editing.active:
        raise NeedOlderMessagesError  # the edits are a fold over the whole range
    return edit_turns(_turns(messages, costs, request), fixed, request.editing, costs)


def _fit_estimated(
    turns: list[Turn], fixed: int, available: int, estimate: Estimate | None, budget: int
) -> tuple[list[Turn], int]:
    """:func:`_fit`, its shortfall stated in the provider's tokens when the counts are estimated."""
    try:
        return _fit(turns, fixed, available)
    except ContextBudgetExceededError as e:
        if estimate is None:
            raise
        raise ContextBudgetExceededError(needed=estimate.scaled(e.needed, margin=True), available=budget) from None


@dataclass(frozen=True, slots=True)
class _Render:
    """Renders the fitted context in its format, leaving out what no context can carry."""

    summary_text: str | None
    target: Target
    formats: FormatRegistry

    def request(self, head: Sequence[Selected], served: Sequence[Served]) -> RenderRequest:
        selected = tuple(s.selected for s in served)
        return RenderRequest(tuple(s.message for s in head), self.summary_text, selected, self.target)

    def servable(
        self, head: list[Selected], kept: list[Turn], served: list[Served], skip_groups: int
    ) -> tuple[Rendered, list[Selected], list[Served], list[str]]:
        """The rendering, the system messages and served messages it holds, and the ids of those
        left out (query_api/unservable.py): none, unless a stored message cannot be carried."""
        request = self.request(head, served)
        too_deep_one = any(too_deep(s.selected.message) for s in served)
        rendered = None if too_deep_one else checked_render(request, formats=self.formats)
        if rendered is not None:
            return rendered, head, served, []
        kept_head, served, unservable = _servable(head, kept, skip_groups, self.target, self.formats)
        request = self.request(kept_head, served)
        rendered = checked_render(request, formats=self.formats)
        if rendered is None:  # a bug, never a request problem: refuse rather than serve an invalid context
            fragment = self.formats.render(request).fragment
            found = violations(fragment, self.target, formats=self.formats)
            raise AssertionError(f"assembled an invalid {self.target.format} context: {found}")
        return rendered, kept_head, served, unservable


def _units(
    head: Sequence[Selected], summary: StoredSummary | None, costs: Costs, fixed: int, served: Sequence[Served]
) -> tuple[tuple[str, int], ...]:
    """What the context is made of, in order, each with its cost: two contexts whose units agree
    up to some point render the same prefix up to there (rendering is a pure function of them)."""
    units = [(f"system:{s.message.message_id}", costs(s)) for s in head]
    if summary is not None:
        units += _summary_units(summary, fixed - costs.spec.reply_priming - sum(c for _, c in units), costs)
    for x in served:
        s, m = x.selected, x.selected.message
        # Only what changes the rendering: image_turns moves keep_images every turn, but a
        # message without images renders the same either way.
        images = s.keep_images if m.image_count or m.blocks else None
        reasoning = s.include_reasoning if m.reasoning_content else None
        edit = "" if x.edit is None else f":{x.edit}"  # an edited message renders otherwise
        units.append((f"{m.message_id}:{','.join(s.call_ids)}:{images}:{reasoning}{edit}", x.cost))
    return tuple(units)


def _summary_units(summary: StoredSummary, cost: int, costs: Costs) -> list[tuple[str, int]]:
    """The summary's system message as units. A summary that extends the one before (the
    offline summarizer appends a bullet per turn until its limit) renders the same leading
    text, which a token-prefix cache (OpenAI, DeepSeek, Gemini) serves again: one unit per
    line, keyed by its text, costed as what the line adds to the count of the text before it
    (so the units add up to the message's cost exactly). Anthropic caches only at block
    boundaries and the summary is one block: one unit (the format's ``cache_granularity``). The
    first unit is the message's frame and header."""
    if costs.traits.cache_granularity == "block":
        return [(f"summary:{summary.summary_id}", cost)]
    before = costs.count(SUMMARY_HEADER)
    return [
        ("summary-head", cost - costs.count(SUMMARY_HEADER + summary.text) + before),
        *_summary_line_units(summary.text, costs.count),
    ]


@functools.lru_cache(maxsize=256)
def _summary_line_units(text: str, count: Count) -> tuple[tuple[str, int], ...]:
    """The summary's lines as units (see :func:`_summary_units`). Cached: every context of a
    conversation serves the same summary until the next one, and counting each line's prefix
    again (a new string to hash and look up per line) was most of a short context's summary cost."""
    prefix = SUMMARY_HEADER
    before = count(prefix)
    units = []
    for i, line in enumerate(text.split("\n")):
        prefix += ("\n" if i else "") + line
        now = count(prefix)
        units.append((f"summary-line:{line}", now - before))
        before = now
    return tuple(units)


def _servable(
    head: list[Selected], kept: list[Turn], skip_groups: int, target: Target, formats: FormatRegistry
) -> tuple[list[Selected], list[Served], list[str]]:
    """The system messages and the served messages a context can carry, and the ids of those it
    cannot (query_api/unservable.py), in log order. First each unit on its own, behind its turn's
    question; then, if they still break the rules together (the same call id in two tool groups),
    unit by unit in order, each kept only if the context so far stays valid with it. A question
    that cannot be carried takes its turn with it (the answers make no sense alone)."""
    left_out: list[StoredMessage] = []

    def renders(system: Sequence[Selected], messages: Sequence[Served]) -> bool:
        if any(too_deep(x.message) for x in system) or any(too_deep(x.selected.message) for x in messages):
            return False
        selected = tuple(x.selected for x in messages)
        request = RenderRequest(tuple(x.message for x in system), None, selected, target)
        return checked_render(request, formats=formats) is not None

    def leave_out(*units: Sequence[Served]) -> None:
        left_out.extend(x.selected.message for unit in units for x in unit)

    kept_head = [s for s in head if renders([s], [])]
    left_out.extend(s.message for s in head if s not in kept_head)
    turns: list[list[list[Served]]] = []
    for i, turn in enumerate(kept):
        question, *answers = turn.units(skip_groups=skip_groups if i == len(kept) - 1 else 0)
        if not renders([], question):
            leave_out(question, *answers)
            continue
        turns.append([question])
        for unit in answers:
            if renders([], [*question, *unit]):
                turns[-1].append(unit)
            else:
                leave_out(unit)
    served = [x for units in turns for unit in units for x in unit]
    if not renders(kept_head, served):
        served = []
        for question, *answers in turns:
            if not renders(kept_head, [*served, *question]):
                leave_out(question, *answers)
                continue
            served.extend(question)
            for unit in answers:
                if renders(kept_head, [*served, *unit]):
                    served.extend(unit)
                else:
                    leave_out(unit)
    return kept_head, served, [m.message_id for m in sorted(left_out, key=lambda m: m.seq)]


def _fit(turns: list[Turn], fixed: int, available: int) -> tuple[list[Turn], int]:
    """The newest turns that fit, and how many of the last turn's oldest tool groups to skip."""
    if not turns:
        if fixed > available:
            raise ContextBudgetExceededError(needed=fixed, available=available)
        return [], 0
    last = turns[-1]
    skip = 0
    while fixed + last.cost(skip_groups=skip) > available and skip < len(last.groups):
        skip += 1
    if fixed + last.cost(skip_groups=skip) > available:
        raise ContextBudgetExceededError(needed=fixed + last.cost(skip_groups=skip), available=available)
    total = fixed + last.cost(skip_groups=skip)
    kept = [last]
    for turn in reversed(turns[:-1]):
        if skip or total + turn.cost() > available:
            break  # older turns go first; once one does not fit, none older may stay (no gaps)
        total += turn.cost()
        kept.append(turn)
    kept.reverse()
    return kept, skip
