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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from events.blocks import OpaqueBlock
from events.errors import ConvlogError
from events.event_types import tool_calls_ran
from projectors.tokens import message_cost, text_message_cost
from projectors.turns import split_turns
from query_api.context_types import (
    Context,
    ContextBudgetExceededError,
    ContextRequest,
    ModelSpec,
    StoredMessage,
    StoredSummary,
)
from query_api.estimates import CALIBRATION_MESSAGES, estimate_for
from query_api.formats import renderer_for
from query_api.formats.types import Dropped, RenderRequest, Selected, Target, extras_served, reasoning_served
from query_api.unservable import checked_render, too_deep, violations

SUMMARY_HEADER = "Summary of the earlier conversation:\n"

Count = Callable[[str], int]


class NeedOlderMessagesError(ConvlogError):
    """Raised by :func:`assemble` given only the newest messages when it cannot tell without
    the older ones. A signal to the reader (read the whole range and assemble again), caught
    where the partial read is made; kept an exception rather than a return value so that the
    callers that pass the whole range (``complete=True``, which never raises it) keep a plain
    :class:`Context` result."""

    code = "need_older_messages"


@dataclass(slots=True)
class _Served:
    selected: Selected
    cost: int


@dataclass(slots=True)
class _Turn:
    user: _Served
    groups: list[list[_Served]] = field(default_factory=list)  # each: assistant with tool calls + results
    rest: list[_Served] = field(default_factory=list)  # other messages
    order: list[tuple[str, int]] = field(default_factory=list)  # ("group", i) / ("rest", i) in log order

    def messages(self, *, skip_groups: int = 0) -> list[_Served]:
        out = [self.user]
        for kind, i in self.order:
            if kind == "group":
                if i >= skip_groups:
                    out.extend(self.groups[i])
            else:
                out.append(self.rest[i])
        return out

    def units(self, *, skip_groups: int = 0) -> list[list[_Served]]:
        """:meth:`messages` in the units a message is served or left out with: the question,
        then each tool group (the call and its results) and each other answer."""
        out = [[self.user]]
        for kind, i in self.order:
            if kind == "group":
                if i >= skip_groups:
                    out.append(self.groups[i])
            else:
                out.append([self.rest[i]])
        return out

    def cost(self, *, skip_groups: int = 0) -> int:
        return sum(s.cost for s in self.messages(skip_groups=skip_groups))


def _usable(m: StoredMessage) -> bool:
    return not (m.redacted or m.erased or m.flag is not None)


class _Costs:
    """What a selected message costs in the target's prompt: tiktoken's count of what is served
    (stored counts, recounted only when images or calls are left out), plus — for a format other
    than Chat Completions — the native reasoning and opaque blocks the target is served."""

    def __init__(self, spec: ModelSpec, count: Count, target: Target) -> None:
        self.spec, self.count, self.target = spec, count, target
        self.chat = target.format == "chat_completions"

    def __call__(self, s: Selected) -> int:
        m = s.message
        if m.role == "tool" and m.name:
            m = replace(m, name=None)  # no format serves a tool result's name (the call carries it)
        calls = None if len(s.call_ids) == len(m.tool_calls) else [c for c in m.tool_calls if c["id"] in s.call_ids]
        cost = message_cost(m, self.spec, include_reasoning=s.include_reasoning, keep_images=s.keep_images,
                            count=self.count, tool_calls=calls)  # fmt: skip
        if self.chat or not m.blocks:
            return cost
        if m.reasoning_tokens and reasoning_served(m, self.target) is None:
            cost += m.reasoning_tokens
        if extras_served(m, self.target):
            cost += sum(self.count(b.json) for b in m.blocks if isinstance(b, OpaqueBlock))
        return cost


def _build_turn(messages: Sequence[StoredMessage], costs: _Costs, *, keep_images: bool, reasoning: str) -> _Turn | None:
    """One turn (a user message and what followed it) made valid; None if its user message
    cannot be served (the answers make no sense without the question)."""
    user = messages[0]
    if not _usable(user):
        return None
    made_tool_calls = any(m.role == "assistant" and m.tool_calls and _usable(m) for m in messages)
    include_reasoning = costs.chat and (reasoning == "all" or (reasoning == "tool_turns" and made_tool_calls))

    def served(s: Selected) -> _Served:
        return _Served(s, costs(s))

    turn = _Turn(user=served(Selected(user, keep_images=keep_images)))
    i = 1
    while i < len(messages):
        m = messages[i]
        i += 1
        if m.role != "assistant" or not _usable(m):
            continue  # orphan tool results, unusable messages (a tool result after them is an orphan too)
        call_ids = [c["id"] for c in m.tool_calls] if tool_calls_ran(m.finish_reason) else []
        answers: dict[str, StoredMessage] = {}
        while i < len(messages) and messages[i].role == "tool":
            t = messages[i]
            if _usable(t) and t.tool_call_id in call_ids and t.tool_call_id not in answers:
                answers[t.tool_call_id or ""] = t
            i += 1
        calls = tuple(c["id"] for c in m.tool_calls if c["id"] in answers and c["id"] in call_ids)
        has_text = bool(m.content) if not isinstance(m.content, list) else any(m.content)
        if not calls and not has_text:
            continue  # nothing the user saw and no finished call: not served
        assistant = served(Selected(m, calls, keep_images, include_reasoning))
        if calls:
            group = [assistant] + [served(Selected(answers[c], keep_images=keep_images)) for c in calls]
            turn.order.append(("group", len(turn.groups)))
            turn.groups.append(group)
        else:
            turn.order.append(("rest", len(turn.rest)))
            turn.rest.append(assistant)
    return turn


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
) -> Context:
    """The context for ``request``, in ``request.format``; raises
    :class:`ContextBudgetExceededError` when even the system messages, the summary and the
    current turn's user message do not fit.

    ``complete=False`` says ``messages`` are only the newest of the range (a long history read
    for its tail): the result is the same as from the whole range as long as the budget cut
    inside them — else :class:`NeedOlderMessagesError` asks for the whole range.
    ``usable_turns`` is then the number of usable turns in the whole range, for
    ``dropped_turns``."""
    target = Target(request.format, request.model, request.reasoning, request.cache)
    costs = _Costs(spec, count, target)
    head = [Selected(m, keep_images=False) for m in system if _usable(m) and m.content]
    fixed = spec.reply_priming + sum(costs(s) for s in head)
    summary_text = None if summary is None else SUMMARY_HEADER + summary.text
    if summary_text is not None:
        fixed += text_message_cost("system", summary_text, spec, count)
    raw_turns = split_turns(messages).turns  # a preamble (a greeting) cannot open a context: rule 2
    turns: list[_Turn] = []
    for index, raw in enumerate(raw_turns):
        keep_images = index >= len(raw_turns) - request.image_turns
        turn = _build_turn(raw, costs, keep_images=keep_images, reasoning=request.reasoning)
        if turn is not None:
            turns.append(turn)
    budget = request.message_budget
    recent = {m.message_id for m in messages[-CALIBRATION_MESSAGES:]}
    estimate = estimate_for(
        spec, target, [s for t in turns for s in t.messages() if s.selected.message.message_id in recent]
    )
    available = budget if estimate is None else estimate.tokens_available(budget)
    if not complete and (not turns or (estimate is not None and len(messages) < CALIBRATION_MESSAGES)):
        # The newest usable question is older than what was read; or fewer rows were read than
        # calibration looks at (as_of, from the whole range, would see more of them).
        raise NeedOlderMessagesError
    try:
        kept, skip_groups = _fit(turns, fixed, available)
    except ContextBudgetExceededError as e:
        if estimate is None:
            raise
        raise ContextBudgetExceededError(needed=estimate.scaled(e.needed, margin=True), available=budget) from None
    if not complete and len(kept) == len(turns) and skip_groups == 0:
        # Every turn read fits: older, unread ones might too. (Had one not fit, no older one
        # could stay — trimming never leaves a gap — so the tail is then the whole answer.)
        raise NeedOlderMessagesError
    served = [
        s for i, turn in enumerate(kept) for s in turn.messages(skip_groups=skip_groups if i == len(kept) - 1 else 0)
    ]
    request_ = RenderRequest(tuple(s.message for s in head), summary_text, tuple(s.selected for s in served), target)
    rendered = None if any(too_deep(s.selected.message) for s in served) else checked_render(request_)
    unservable: list[str] = []
    if rendered is None:  # a stored message it cannot carry: leave it out (query_api/unservable.py)
        kept_head, served, unservable = _servable(head, kept, skip_groups, target)
        fixed -= sum(costs(s) for s in head if s not in kept_head)
        head = kept_head
        request_ = RenderRequest(tuple(s.message for s in head), summary_text, tuple(s.selected for s in served),
                                 target)  # fmt: skip
        rendered = checked_render(request_)
        if rendered is None:  # a bug, never a request problem: refuse rather than serve an invalid context
            fragment = renderer_for(target.format)(request_).fragment
            raise AssertionError(f"assembled an invalid {target.format} context: {violations(fragment, target)}")
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
    )


def _units(
    head: Sequence[Selected], summary: StoredSummary | None, costs: _Costs, fixed: int, served: Sequence[_Served]
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
        units.append((f"{m.message_id}:{','.join(s.call_ids)}:{images}:{reasoning}", x.cost))
    return tuple(units)


def _summary_units(summary: StoredSummary, cost: int, costs: _Costs) -> list[tuple[str, int]]:
    """The summary's system message as units. A summary that extends the one before (the
    offline summarizer appends a bullet per turn until its limit) renders the same leading
    text, which a token-prefix cache (OpenAI, DeepSeek, Gemini) serves again: one unit per
    line, keyed by its text, costed as what the line adds to the count of the text before it
    (so the units add up to the message's cost exactly). Anthropic caches only at block
    boundaries and the summary is one block: one unit. The first unit is the message's frame
    and header."""
    if costs.target.format == "anthropic":
        return [(f"summary:{summary.summary_id}", cost)]
    before = costs.count(SUMMARY_HEADER)
    return [("summary-head", cost - costs.count(SUMMARY_HEADER + summary.text) + before),
            *_summary_line_units(summary.text, costs.count)]  # fmt: skip


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
    head: list[Selected], kept: list[_Turn], skip_groups: int, target: Target
) -> tuple[list[Selected], list[_Served], list[str]]:
    """The system messages and the served messages a context can carry, and the ids of those it
    cannot (query_api/unservable.py), in log order. First each unit on its own, behind its turn's
    question; then, if they still break the rules together (the same call id in two tool groups),
    unit by unit in order, each kept only if the context so far stays valid with it. A question
    that cannot be carried takes its turn with it (the answers make no sense alone)."""
    left_out: list[StoredMessage] = []

    def renders(system: Sequence[Selected], messages: Sequence[_Served]) -> bool:
        if any(too_deep(x.message) for x in system) or any(too_deep(x.selected.message) for x in messages):
            return False
        selected = tuple(x.selected for x in messages)
        return checked_render(RenderRequest(tuple(x.message for x in system), None, selected, target)) is not None

    def leave_out(*units: Sequence[_Served]) -> None:
        left_out.extend(x.selected.message for unit in units for x in unit)

    kept_head = [s for s in head if renders([s], [])]
    left_out.extend(s.message for s in head if s not in kept_head)
    turns: list[list[list[_Served]]] = []
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


def _fit(turns: list[_Turn], fixed: int, available: int) -> tuple[list[_Turn], int]:
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
