"""What a context serves of a conversation's turns, before any budget: each turn made valid
(its question, its answered tool groups, its other answers) and what each message costs in the
target's prompt. Pure; the assembler (query_api/context.py) fits and renders the result."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from events.blocks import OpaqueBlock
from events.event_types import tool_calls_ran
from events.formats.registry import FormatRegistry
from events.formats.rendering import Selected, Target, extras_served
from projectors.tokens import message_cost
from query_api.context_types import ModelSpec, StoredMessage

__all__ = ["Costs", "Count", "Served", "Turn", "build_turn", "usable"]

Count = Callable[[str], int]


@dataclass(slots=True)
class Served:
    """A selected message and what it costs in the target's prompt; ``edit``: the context
    edit that changed it (query_api/context_editing.py), ``saved`` the tokens that saved."""

    selected: Selected
    cost: int
    edit: str | None = None
    saved: int = 0


@dataclass(slots=True)
class Turn:
    """A user message and what is served after it: its tool groups and other answers, in log order."""

    user: Served
    groups: list[list[Served]] = field(default_factory=list)  # each: assistant with tool calls + results
    rest: list[Served] = field(default_factory=list)  # other messages
    order: list[tuple[str, int]] = field(default_factory=list)  # ("group", i) / ("rest", i) in log order

    def messages(self, *, skip_groups: int = 0) -> list[Served]:
        out = [self.user]
        for kind, i in self.order:
            if kind == "group":
                if i >= skip_groups:
                    out.extend(self.groups[i])
            else:
                out.append(self.rest[i])
        return out

    def units(self, *, skip_groups: int = 0) -> list[list[Served]]:
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


def usable(m: StoredMessage) -> bool:
    """Whether a stored message may be served at all (not redacted, erased or flagged)."""
    return not (m.redacted or m.erased or m.flag is not None)


class Costs:
    """What a selected message costs in the target's prompt: tiktoken's count of what is served
    (stored counts, recounted only when images or calls are left out), plus — for a format that
    carries native blocks (not Chat Completions, whose reasoning follows the request's policy) —
    the native reasoning and opaque blocks the target is served."""

    def __init__(self, spec: ModelSpec, count: Count, target: Target, formats: FormatRegistry) -> None:
        self.spec, self.count, self.target, self.formats = spec, count, target, formats
        self.traits = formats.traits(target.format)
        self.chat = self.traits.reasoning_by_policy

    def __call__(self, s: Selected) -> int:
        m = s.message
        if m.role == "tool" and m.name:
            m = replace(m, name=None)  # no format serves a tool result's name (the call carries it)
        calls = None if len(s.call_ids) == len(m.tool_calls) else [c for c in m.tool_calls if c["id"] in s.call_ids]
        cost = message_cost(
            m,
            self.spec,
            include_reasoning=s.include_reasoning,
            keep_images=s.keep_images,
            count=self.count,
            tool_calls=calls,
        )
        if self.chat or not m.blocks:
            return cost
        if m.reasoning_tokens and self.formats.reasoning_served(m, self.target) is None:
            cost += m.reasoning_tokens
        if extras_served(m, self.target):
            cost += sum(self.count(b.json) for b in m.blocks if isinstance(b, OpaqueBlock))
        return cost


def build_turn(messages: Sequence[StoredMessage], costs: Costs, *, keep_images: bool, reasoning: str) -> Turn | None:
    """One turn (a user message and what followed it) made valid; None if its user message
    cannot be served (the answers make no sense without the question)."""
    user = messages[0]
    if not usable(user):
        return None
    made_tool_calls = any(m.role == "assistant" and m.tool_calls and usable(m) for m in messages)
    include_reasoning = costs.chat and (reasoning == "all" or (reasoning == "tool_turns" and made_tool_calls))

    def served(s: Selected) -> Served:
        return Served(s, costs(s))

    turn = Turn(user=served(Selected(user, keep_images=keep_images)))
    i = 1
    while i < len(messages):
        m = messages[i]
        i += 1
        if m.role != "assistant" or not usable(m):
            continue  # orphan tool results, unusable messages (a tool result after them is an orphan too)
        call_ids = [c["id"] for c in m.tool_calls] if tool_calls_ran(m.finish_reason) else []
        answers: dict[str, StoredMessage] = {}
        while i < len(messages) and messages[i].role == "tool":
            t = messages[i]
            if usable(t) and t.tool_call_id in call_ids and t.tool_call_id not in answers:
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
