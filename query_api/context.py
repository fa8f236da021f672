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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from events.errors import ConvlogError
from projectors.tokens import drop_images, message_cost, text_message_cost
from projectors.turns import split_turns
from query_api.context_types import (
    Context,
    ContextBudgetExceededError,
    ContextRequest,
    ModelSpec,
    StoredMessage,
    StoredSummary,
)
from query_api.rules import violations

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
    message: dict[str, Any]
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

    def cost(self, *, skip_groups: int = 0) -> int:
        return sum(s.cost for s in self.messages(skip_groups=skip_groups))


def _usable(m: StoredMessage) -> bool:
    return not (m.redacted or m.erased or m.flag is not None)


def _serve(
    m: StoredMessage,
    spec: ModelSpec,
    count: Count,
    *,
    tool_calls: Sequence[dict[str, Any]] | None = None,
    keep_images: bool,
    include_reasoning: bool,
) -> _Served:
    if m.role == "tool" and m.name:
        m = replace(m, name=None)  # Chat Completions takes no name on tool messages (the call carries it)
    calls = list(m.tool_calls) if tool_calls is None else list(tool_calls)
    message: dict[str, Any] = {"role": m.role, "content": m.content if keep_images else drop_images(m.content)}
    if m.name:
        message["name"] = m.name
    if calls:
        message["tool_calls"] = calls
    if m.role == "tool":
        message["tool_call_id"] = m.tool_call_id
    if include_reasoning and m.reasoning_content:
        message["reasoning_content"] = m.reasoning_content
    cost = message_cost(
        m, spec, include_reasoning=include_reasoning, keep_images=keep_images, count=count,
        tool_calls=None if len(calls) == len(m.tool_calls) else calls,
    )  # fmt: skip
    return _Served(message, cost)


def _build_turn(
    messages: Sequence[StoredMessage], spec: ModelSpec, count: Count, *, keep_images: bool, reasoning: str
) -> _Turn | None:
    """One turn (a user message and what followed it) made valid; None if its user message
    cannot be served (the answers make no sense without the question)."""
    user = messages[0]
    if not _usable(user):
        return None
    made_tool_calls = any(m.role == "assistant" and m.tool_calls and _usable(m) for m in messages)
    include_reasoning = reasoning == "all" or (reasoning == "tool_turns" and made_tool_calls)
    turn = _Turn(user=_serve(user, spec, count, keep_images=keep_images, include_reasoning=False))
    i = 1
    while i < len(messages):
        m = messages[i]
        i += 1
        if m.role != "assistant" or not _usable(m):
            continue  # orphan tool results, unusable messages (a tool result after them is an orphan too)
        call_ids = [] if m.finish_reason == "interrupted" else [c["id"] for c in m.tool_calls]
        answers: dict[str, StoredMessage] = {}
        while i < len(messages) and messages[i].role == "tool":
            t = messages[i]
            if _usable(t) and t.tool_call_id in call_ids and t.tool_call_id not in answers:
                answers[t.tool_call_id or ""] = t
            i += 1
        calls = [c for c in m.tool_calls if c["id"] in answers and c["id"] in call_ids]
        has_text = bool(m.content) if not isinstance(m.content, list) else any(m.content)
        if not calls and not has_text:
            continue  # nothing the user saw and no finished call: not served
        served = _serve(m, spec, count, tool_calls=calls, keep_images=keep_images, include_reasoning=include_reasoning)
        if calls:
            group = [served]
            group += [
                _serve(answers[c["id"]], spec, count, keep_images=keep_images, include_reasoning=False) for c in calls
            ]
            turn.order.append(("group", len(turn.groups)))
            turn.groups.append(group)
        else:
            turn.order.append(("rest", len(turn.rest)))
            turn.rest.append(served)
    return turn


def context_start(window_start: int | None, summary_covers_through: int | None) -> int:
    """Where a context's non-system messages start: with no summary, the whole current epoch
    (turns no summary covers stay); else the earliest of the window's start and the first
    message the summary does not cover."""
    if summary_covers_through is None:
        return 0
    after = summary_covers_through + 1
    return after if window_start is None else min(window_start, after)


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
    """The context for ``request``; raises :class:`ContextBudgetExceededError` when even the
    system messages, the summary and the current turn's user message do not fit.

    ``complete=False`` says ``messages`` are only the newest of the range (a long history read
    for its tail): the result is the same as from the whole range as long as the budget cut
    inside them — else :class:`NeedOlderMessagesError` asks for the whole range.
    ``usable_turns`` is then the number of usable turns in the whole range, for
    ``dropped_turns``."""
    head = [
        _serve(m, spec, count, keep_images=False, include_reasoning=False) for m in system if _usable(m) and m.content
    ]
    if summary is not None:
        message = {"role": "system", "content": SUMMARY_HEADER + summary.text}
        head.append(_Served(message, text_message_cost("system", message["content"], spec, count)))
    raw_turns = split_turns(messages).turns  # a preamble (a greeting) cannot open a context: rule 2
    turns: list[_Turn] = []
    for index, raw in enumerate(raw_turns):
        keep_images = index >= len(raw_turns) - request.image_turns
        turn = _build_turn(raw, spec, count, keep_images=keep_images, reasoning=request.reasoning)
        if turn is not None:
            turns.append(turn)
    available = request.budget_tokens - request.reserve_tokens - request.tools_tokens
    fixed = spec.reply_priming + sum(s.cost for s in head)
    if not complete and not turns:
        raise NeedOlderMessagesError  # the newest usable question is older than what was read
    kept, skip_groups = _fit(turns, fixed, available)
    if not complete and len(kept) == len(turns) and skip_groups == 0:
        # Every turn read fits: older, unread ones might too. (Had one not fit, no older one
        # could stay — trimming never leaves a gap — so the tail is then the whole answer.)
        raise NeedOlderMessagesError
    served = [s.message for s in head]
    for i, turn in enumerate(kept):
        served += [s.message for s in turn.messages(skip_groups=skip_groups if i == len(kept) - 1 else 0)]
    total = fixed + sum(t.cost(skip_groups=skip_groups if i == len(kept) - 1 else 0) for i, t in enumerate(kept))
    broken = violations(served, reasoning=request.reasoning)
    if broken:  # a bug, never a request problem: refuse rather than serve an invalid array
        raise AssertionError(f"assembled an invalid context: {broken}")
    return Context(
        messages=tuple(served),
        token_count=total,
        encoding=spec.encoding,
        dropped_turns=(len(turns) if complete or usable_turns is None else usable_turns) - len(kept),
        compressed=summary is not None,
        summary=summary,
    )


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
