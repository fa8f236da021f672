"""Context editing: older tool results served as a placeholder, older turns' thinking left out
(the request's :class:`~query_api.context_types.EditingPolicy`). Pure.

What stays valid: a cleared tool result is still the result of its call — the same message,
its content replaced by :data:`PLACEHOLDER` — so every format keeps the call/result pair (a
``tool_result`` block, a ``function_call_output``, a ``functionResponse``). Thinking is left
out only of turns older than the newest ``thinking_keep_turns`` (at least 1): the current
turn's signed thinking, which Anthropic and Gemini require back during a tool loop, stays. A
Responses function call whose reasoning is left out loses its ``fc_`` item id as well (OpenAI
refuses an item id without the reasoning item it came with); ``call_id`` still pairs it.

Deterministic and in steps. The edits are a fold over the range's served messages in log
order, as a server that kept state would have made them turn after turn: after each message,
the context so far is costed with the edits made so far; thinking of turns now older than the
kept ones is left out once at least ``thinking_at_least`` tokens of it would go; when the
context exceeds ``tool_results_trigger``, every result older than the newest
``tool_results_keep`` tool uses (the excluded tools' aside) is cleared at once, if at least
``tool_results_at_least`` tokens go. An edit never comes back, and between two steps the
edited messages are the same: consecutive contexts share their prefix (the prompt cache keeps
hitting), and the same history and policy give the same edits (``as_of`` rebuilds them). The
fold needs the whole range: an editing request reads it whole (query_api/live/ranges.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final, Literal
from urllib.parse import parse_qsl

from events.blocks import ReasoningBlock, ToolCallBlock
from events.errors import InvalidRequestError
from events.formats.rendering import Selected
from query_api.context_types import NO_EDITING, ContextEdit, EditingPolicy
from query_api.estimates import Estimate
from query_api.selection import Costs, Served, Turn

__all__ = [
    "CLEAR_THINKING",
    "CLEAR_TOOL_RESULTS",
    "PLACEHOLDER",
    "EditingParameterError",
    "EditingParameters",
    "edit_turns",
    "edits_of",
    "policy_from_query",
    "tool_names",
]

PLACEHOLDER = "[tool result cleared]"
CLEAR_TOOL_RESULTS: Final = "clear_tool_results"
CLEAR_THINKING: Final = "clear_thinking"
_KINDS: tuple[Literal["clear_thinking", "clear_tool_results"], ...] = (CLEAR_THINKING, CLEAR_TOOL_RESULTS)


@dataclass(frozen=True, slots=True)
class _Candidate:
    seq: int  # the message's (unique in the range)
    saved: int  # what editing it saves
    at: int  # the tool use's index (tool results) or the turn's (thinking)


@dataclass(slots=True)
class _Fold:
    """The edits so far, and the context's cost with them."""

    policy: EditingPolicy
    running: int
    scale: float  # the policy's tokens per counted token: 1, or an estimated model's uncalibrated factor
    uses: dict[str, tuple[int, str]] = field(default_factory=dict)  # call id -> (tool use index, tool name)
    results: list[_Candidate] = field(default_factory=list)  # not cleared yet, in log order
    thinking: list[_Candidate] = field(default_factory=list)
    n_uses: int = 0
    cleared: set[int] = field(default_factory=set)  # seqs
    unthought: set[int] = field(default_factory=set)

    def settle(self, turns_seen: int) -> None:
        """The edits a server would make with the context as it is now."""
        keep_turns = self.policy.thinking_keep_turns
        if keep_turns is not None:
            self.thinking = self._step(
                self.thinking, turns_seen - keep_turns, self.policy.thinking_at_least, self.unthought
            )
        trigger = self.policy.tool_results_trigger
        if trigger is not None and self.running * self.scale > trigger:
            self.results = self._step(
                self.results,
                self.n_uses - self.policy.tool_results_keep,
                self.policy.tool_results_at_least,
                self.cleared,
            )

    def _step(self, pending: list[_Candidate], before: int, at_least: int, done: set[int]) -> list[_Candidate]:
        """Every candidate older than ``before`` edited at once, if that saves at least
        ``at_least`` tokens (and any); the candidates left."""
        due = [c for c in pending if c.at < before]
        saved = sum(c.saved for c in due)
        if not due or saved <= 0 or saved * self.scale < at_least:
            return pending
        done.update(c.seq for c in due)
        self.running -= saved
        return [c for c in pending if c.at >= before]


def edit_turns(turns: Sequence[Turn], fixed: int, policy: EditingPolicy, costs: Costs) -> list[Turn]:
    """``turns`` as ``policy`` edits them (``fixed``: what the context costs besides them). For
    a model whose tokens are estimated, the policy's token figures are compared with the counts
    times the format's uncalibrated factor (query_api/estimates.py): a constant, where the
    calibrated factor moves with each answer — and with it, were it used, edits already made."""
    if not policy.active:
        return list(turns)
    scale = costs.traits.estimate_factor if costs.spec.estimated else 1.0
    fold = _Fold(policy, fixed, scale)
    for index, turn in enumerate(turns):
        for s in turn.messages():
            fold.running += s.cost
            _note(fold, s, index, costs)
            fold.settle(index + 1)
    if not fold.cleared and not fold.unthought:
        return list(turns)
    return [_edited(turn, fold, costs) for turn in turns]


def _note(fold: _Fold, s: Served, turn_index: int, costs: Costs) -> None:
    """What ``s`` adds to the fold: its tool uses, or its result, or its thinking."""
    m = s.selected.message
    if m.role == "assistant":
        names = {c["id"]: c["function"]["name"] for c in m.tool_calls}
        for call_id in s.selected.call_ids:
            fold.uses[call_id] = (fold.n_uses, names.get(call_id, ""))
            fold.n_uses += 1
        if fold.policy.thinking_keep_turns is not None and _has_thinking(s.selected):
            saved = s.cost - costs(_unthought(s.selected))
            if saved > 0:
                fold.thinking.append(_Candidate(m.seq, saved, turn_index))
    elif m.role == "tool" and fold.policy.tool_results_trigger is not None:
        use = fold.uses.get(m.tool_call_id or "")
        if use is None or use[1] in fold.policy.tool_results_exclude:
            return
        saved = s.cost - costs(_cleared(s.selected, costs))
        if saved > 0:
            fold.results.append(_Candidate(m.seq, saved, use[0]))


def _edited(turn: Turn, fold: _Fold, costs: Costs) -> Turn:
    def edited(s: Served) -> Served:
        seq = s.selected.message.seq
        if seq in fold.cleared:
            selected, kind = _cleared(s.selected, costs), CLEAR_TOOL_RESULTS
        elif seq in fold.unthought:
            selected, kind = _unthought(s.selected), CLEAR_THINKING
        else:
            return s
        cost = costs(selected)
        return Served(selected, cost, kind, s.cost - cost)

    return Turn(
        user=turn.user,
        groups=[[edited(s) for s in group] for group in turn.groups],
        rest=[edited(s) for s in turn.rest],
        order=list(turn.order),
    )


def _cleared(s: Selected, costs: Costs) -> Selected:
    """A tool result served as the placeholder: still the result of its call (and an error if it was one)."""
    m = replace(s.message, content=PLACEHOLDER, blocks=(), image_count=0, tokens=costs.count(PLACEHOLDER))
    return replace(s, message=m)


def _has_thinking(s: Selected) -> bool:
    m = s.message
    return (s.include_reasoning and bool(m.reasoning_content)) or any(isinstance(b, ReasoningBlock) for b in m.blocks)


def _unthought(s: Selected) -> Selected:
    """An assistant message served without its reasoning (and, from Responses, its calls'
    item ids: OpenAI refuses a function call item id without the reasoning item it came with)."""
    m = s.message
    strip = m.api == "responses"
    blocks = tuple(
        replace(b, item_id=None) if strip and isinstance(b, ToolCallBlock) else b
        for b in m.blocks
        if not isinstance(b, ReasoningBlock)
    )
    m = replace(m, blocks=blocks, reasoning_content=None, reasoning_tokens=0)
    return replace(s, message=m, include_reasoning=False)


def edits_of(served: Sequence[Served], estimate: Estimate | None = None) -> tuple[ContextEdit, ...]:
    """The edits of the served messages, by kind (thinking first, as Anthropic lists its own):
    what each saved (in the context's ``token_count`` units: scaled by ``estimate``) and the
    messages it changed."""
    out = []
    for kind in _KINDS:
        changed = [s for s in served if s.edit == kind]
        if changed:
            ids = tuple(s.selected.message.message_id for s in changed)
            saved = sum(s.saved for s in changed)
            out.append(ContextEdit(kind, saved if estimate is None else estimate.scaled(saved, margin=False), ids))
    return tuple(out)


class EditingParameterError(InvalidRequestError):
    """A context-editing parameter out of its range, or one without what it goes with (HTTP 422
    naming ``field``)."""

    code = "invalid_context_editing"

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


MAX_EXCLUDED = 100
MAX_TOOL_NAME = 256


def tool_names(text: str | None, *, field: str = "clear_tool_results_exclude") -> frozenset[str]:
    """The tool names of a comma-separated list (blanks around them ignored)."""
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    if len(names) > MAX_EXCLUDED:
        raise EditingParameterError(f"at most {MAX_EXCLUDED} tool names", field=field)
    if any(len(n) > MAX_TOOL_NAME for n in names):
        raise EditingParameterError(f"a tool name is at most {MAX_TOOL_NAME} characters", field=field)
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class EditingParameters:
    """The editing parameters of one request, None where not given."""

    tool_results_trigger: int | None = None
    tool_results_keep: int | None = None
    tool_results_at_least: int | None = None
    tool_results_exclude: str | None = None
    thinking_keep_turns: int | None = None
    thinking_at_least: int | None = None

    def policy(self, default: EditingPolicy) -> EditingPolicy:
        """``default`` with the parameters given (each named ``clear_<field>`` in the query). A
        parameter of a kind of edit that is off — its switch (the trigger, the turns kept) neither
        given nor configured — is refused rather than ignored."""
        given = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
        if self.tool_results_exclude is not None:
            given["tool_results_exclude"] = tool_names(self.tool_results_exclude)
        policy = replace(default, **given)
        for kind, switch in (("tool_results", "tool_results_trigger"), ("thinking", "thinking_keep_turns")):
            others = [name for name in given if name.startswith(kind) and name != switch]
            if others and getattr(policy, switch) is None:
                raise EditingParameterError(
                    f"clear_{others[0]} goes with clear_{switch} (none given, none configured)", field=f"clear_{switch}"
                )
        return policy


MAX_TOKENS = 10_000_000
MAX_KEPT = 10_000
# The query parameters, each the EditingParameters field it sets and its least value.
QUERY_PARAMETERS: dict[str, tuple[str, int]] = {
    "clear_tool_results_trigger": ("tool_results_trigger", 0),
    "clear_tool_results_keep": ("tool_results_keep", 0),
    "clear_tool_results_at_least": ("tool_results_at_least", 0),
    "clear_tool_results_exclude": ("tool_results_exclude", 0),
    "clear_thinking_keep_turns": ("thinking_keep_turns", 1),  # the current turn's thinking stays
    "clear_thinking_at_least": ("thinking_at_least", 0),
}


def policy_from_query(text: str | None) -> EditingPolicy:
    """The policy a query string of the editing parameters asks for (``CONVLOG_CONTEXT_EDITING``:
    the context route's own names, ranges and rules); :class:`EditingParameterError` naming the
    parameter that is wrong."""
    given: dict[str, Any] = {}
    for name, value in parse_qsl(text or "", keep_blank_values=True):
        if name not in QUERY_PARAMETERS:
            known = ", ".join(QUERY_PARAMETERS)
            raise EditingParameterError(f"unknown parameter {name!r}; expected one of {known}", field=name)
        field_name, least = QUERY_PARAMETERS[name]
        if field_name == "tool_results_exclude":
            given[field_name] = value
            continue
        try:
            number = int(value)
        except ValueError:
            raise EditingParameterError(f"{name} is a whole number, not {value!r}", field=name) from None
        highest = MAX_KEPT if name.endswith(("_keep", "_turns")) else MAX_TOKENS
        if not least <= number <= highest:
            raise EditingParameterError(f"{name} is from {least} to {highest}, not {number}", field=name)
        given[field_name] = number
    return EditingParameters(**given).policy(NO_EDITING)
