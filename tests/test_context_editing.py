"""Context editing (query_api/context_editing.py): older tool results served as a placeholder
that keeps the call/result pair, older turns' thinking left out, in steps — every edited
context valid in every format, the same edits for the same history, and between two clearings
each context's messages start with the previous one's (the prompt cache keeps hitting)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.blocks import ReasoningBlock, TextBlock, ToolCallBlock, native_message
from events.event_types import MessageAppended, ToolCall
from projectors.tokens import count_messages, get_encoding, model_spec
from query_api.context import assemble
from query_api.context_editing import PLACEHOLDER, EditingParameterError, EditingParameters, policy_from_query
from query_api.context_types import (
    NO_EDITING,
    Context,
    ContextBudgetExceededError,
    ContextRequest,
    EditingPolicy,
    StoredMessage,
)
from tests.formats.every_format import TARGETS, conversations, count, stored, validate_with_sdk

LIST_KEY = {"chat_completions": "messages", "anthropic": "messages", "responses": "input", "gemini": "contents"}
BIG = "lorem ipsum dolor sit amet " * 100  # ~500 tokens


def agent_turns(turns: int, *, api: str | None = None, tool: str = "read_file") -> list[MessageAppended]:
    """An agent conversation: each turn a question, a tool call with a large result, an answer."""
    out: list[MessageAppended] = []
    for t in range(turns):
        out += agent_turn(t, api=api, tool=tool)
    return out


def agent_turn(
    t: int, *, api: str | None = None, tool: str = "read_file", thinking: bool = False
) -> list[MessageAppended]:
    user = MessageAppended(message_id=f"u{t}", role="user", content=f"question {t}")
    call = ToolCallBlock(f"call_{t}", tool, json.dumps({"path": f"f{t}.py"}), item_id=f"fc_{t}")
    if api is None:
        return [
            user,
            MessageAppended(
                message_id=f"a{t}",
                role="assistant",
                tool_calls=(ToolCall(call.id, call.name, call.arguments),),
                finish_reason="tool_calls",
                reasoning_content=f"THINK-{t}#" if thinking else None,
            ),
            MessageAppended(message_id=f"t{t}", role="tool", content=f"{t}: {BIG}", tool_call_id=call.id),
            MessageAppended(message_id=f"b{t}", role="assistant", content=f"answer {t}"),
        ]
    model = {"anthropic": "claude-sonnet-4-5", "responses": "gpt-5", "gemini": "gemini-2.5-pro"}[api]
    reasoning = (
        [ReasoningBlock(text=f"THINK-{t}#", signature=f"SIG-{t}#")]
        if api == "anthropic"
        else [ReasoningBlock(summary=(f"THINK-{t}#",), encrypted_content=f"ENC-{t}#", item_id=f"rs_{t}")]
        if api == "responses"
        else [ReasoningBlock(text=f"THINK-{t}#", signature="U0lH")]
    )
    blocks = [*(reasoning if thinking else []), call]
    return [
        user,
        native_message(message_id=f"a{t}", role="assistant", blocks=blocks, api=api, model=model),  # type: ignore[arg-type]
        native_message(
            message_id=f"t{t}",
            role="tool",
            blocks=[TextBlock(f"{t}: {BIG}")],
            api=api,  # type: ignore[arg-type]
            tool_call_id=call.id,
        ),
        native_message(message_id=f"b{t}", role="assistant", blocks=[TextBlock(f"answer {t}")], api=api, model=model),  # type: ignore[arg-type]
    ]


def context(
    history: list[MessageAppended],
    editing: EditingPolicy,
    *,
    fmt: str = "chat_completions",
    model: str = "gpt-4o",
    budget: int = 10**6,
    reasoning: str = "omit",
) -> Context:
    messages = [stored(m, i) for i, m in enumerate(history)]
    request = ContextRequest(model, budget, format=fmt, reasoning=reasoning, editing=editing)  # type: ignore[arg-type]
    return assemble(system=[], summary=None, messages=messages, request=request, spec=model_spec(model), count=count)


def tool_contents(ctx: Context) -> list[Any]:
    return [m["content"] for m in ctx.messages if m["role"] == "tool"]


def test_no_edit_below_the_trigger_and_the_edits_field_is_empty() -> None:
    ctx = context(agent_turns(4), EditingPolicy(tool_results_trigger=10**6))
    assert ctx.edits == ()
    assert PLACEHOLDER not in json.dumps(ctx.fragment)


def test_above_the_trigger_older_results_become_the_placeholder_and_the_calls_stay() -> None:
    history = agent_turns(10)
    plain = context(history, NO_EDITING)
    ctx = context(history, EditingPolicy(tool_results_trigger=2000, tool_results_keep=2))
    contents = tool_contents(ctx)
    assert contents[:8] == [PLACEHOLDER] * 8
    assert contents[8:] == tool_contents(plain)[8:]  # the newest two tool uses kept
    assert [m.get("tool_calls") for m in ctx.messages] == [m.get("tool_calls") for m in plain.messages]
    [edit] = ctx.edits
    assert edit.kind == "clear_tool_results"
    assert edit.messages == tuple(f"t{t}" for t in range(8))
    assert edit.cleared_tokens == plain.token_count - ctx.token_count > 8 * 450


def test_clear_at_least_waits_until_that_much_can_go() -> None:
    history = agent_turns(4)
    # Past the trigger from the second result on, but three results (~1500 tokens) never clear 2000.
    assert (
        context(history, EditingPolicy(tool_results_trigger=600, tool_results_keep=1, tool_results_at_least=2000)).edits
        == ()
    )
    ctx = context(
        history + agent_turns(6)[4:],
        EditingPolicy(tool_results_trigger=600, tool_results_keep=1, tool_results_at_least=2000),
    )
    assert ctx.edits
    assert ctx.edits[0].cleared_tokens >= 2000


def test_the_excluded_tools_results_are_never_cleared() -> None:
    history = [m for t in range(8) for m in agent_turn(t, tool="memory" if t % 2 else "read_file")]
    ctx = context(
        history, EditingPolicy(tool_results_trigger=0, tool_results_keep=0, tool_results_exclude=frozenset({"memory"}))
    )
    contents = tool_contents(ctx)
    assert [c == PLACEHOLDER for c in contents] == [t % 2 == 0 for t in range(8)]


@pytest.mark.parametrize(("fmt", "model"), TARGETS)
def test_clearing_happens_in_steps_and_between_them_each_context_extends_the_last(fmt: str, model: str) -> None:
    """A 40-turn agent conversation, a context per turn: the edits only grow; they change at
    few turns (each step clears at least 3000 tokens); at every other turn the served list starts
    with the previous one's, element for element."""
    policy = EditingPolicy(tool_results_trigger=8000, tool_results_keep=2, tool_results_at_least=3000)
    history: list[MessageAppended] = []
    previous: tuple[list[str], set[str]] | None = None
    steps = 0
    for t in range(40):
        history += agent_turn(t, api=None if t % 3 == 0 else ("anthropic", "responses", "gemini")[t % 3 - 1])
        history.append(MessageAppended(message_id=f"q{t}", role="user", content=f"and then {t}?"))
        ctx = context(history, policy, fmt=fmt, model=model)
        items = [json.dumps(x) for x in ctx.fragment[LIST_KEY[fmt]]]
        cleared = {m for e in ctx.edits for m in e.messages}
        assert ctx.token_count <= 8000 + 600 * 3  # a step brings it back under the trigger (at most a turn over)
        if previous is not None:
            before, was_cleared = previous
            assert was_cleared <= cleared
            if cleared == was_cleared:
                assert items[: len(before) - 1] == before[:-1], t  # the last: the question, merged in some formats
            else:
                steps += 1
        previous = items, cleared
    assert 3 <= steps <= 12


@pytest.mark.parametrize(
    ("fmt", "model", "api"),
    [
        ("chat_completions", "deepseek-v4", None),
        ("anthropic", "claude-sonnet-4-5", "anthropic"),
        ("responses", "gpt-5", "responses"),
        ("gemini", "gemini-2.5-pro", "gemini"),
    ],
)
def test_thinking_of_the_older_turns_goes_and_the_current_turns_stays(fmt: str, model: str, api: str | None) -> None:
    history = [m for t in range(5) for m in agent_turn(t, api=api, thinking=True)]
    history = history[:-1]  # the current turn: its tool loop still open (the result is the last message)
    plain = context(history, NO_EDITING, fmt=fmt, model=model, reasoning="all")
    ctx = context(history, EditingPolicy(thinking_keep_turns=2), fmt=fmt, model=model, reasoning="all")
    served, before = json.dumps(ctx.fragment), json.dumps(plain.fragment)
    assert all(f"THINK-{t}#" in before for t in range(5))
    assert [f"THINK-{t}#" in served for t in range(5)] == [False, False, False, True, True]
    [edit] = ctx.edits
    assert (edit.kind, edit.messages) == ("clear_thinking", ("a0", "a1", "a2"))
    assert abs(edit.cleared_tokens - (plain.token_count - ctx.token_count)) <= 1  # an estimate's rounding
    assert edit.cleared_tokens > 0
    if fmt == "responses":  # a function call without its reasoning item loses its fc_ id (OpenAI refuses it)
        calls = {i["call_id"]: i.get("id") for i in ctx.fragment["input"] if i["type"] == "function_call"}
        assert calls == {"call_0": None, "call_1": None, "call_2": None, "call_3": "fc_3", "call_4": "fc_4"}


def test_thinking_clears_at_least_that_much_at_a_time() -> None:
    history = [m for t in range(6) for m in agent_turn(t, thinking=True)]
    small = context(history, EditingPolicy(thinking_keep_turns=1), model="deepseek-v4", reasoning="all")
    assert small.edits[0].messages == ("a0", "a1", "a2", "a3", "a4")
    each = small.edits[0].cleared_tokens // 5
    stepped = context(
        history, EditingPolicy(thinking_keep_turns=1, thinking_at_least=3 * each), model="deepseek-v4", reasoning="all"
    )
    assert stepped.edits[0].messages == ("a0", "a1", "a2")  # cleared at turn 4 (3 due); at turn 5 only 2 more due


def test_a_cleared_message_costs_what_it_renders() -> None:
    """The accounting follows the edit: the placeholder's cost, not the stored result's."""
    ctx = context(agent_turns(6), EditingPolicy(tool_results_trigger=0, tool_results_keep=1))
    spec = model_spec("gpt-4o")
    assert ctx.token_count == count_messages(list(ctx.messages), spec, get_encoding(spec.encoding))  # priming included


def test_parameters_are_checked_and_name_the_parameter() -> None:
    default = EditingPolicy(tool_results_trigger=100)
    assert EditingParameters(tool_results_keep=1).policy(default) == EditingPolicy(
        tool_results_trigger=100, tool_results_keep=1
    )
    assert EditingParameters(tool_results_exclude=" a, b ,,").policy(default).tool_results_exclude == {"a", "b"}
    with pytest.raises(EditingParameterError) as e:
        EditingParameters(tool_results_keep=1).policy(NO_EDITING)
    assert e.value.field == "clear_tool_results_trigger"
    with pytest.raises(EditingParameterError) as e:
        EditingParameters(thinking_at_least=1).policy(default)
    assert e.value.field == "clear_thinking_keep_turns"
    assert policy_from_query("clear_tool_results_trigger=5&clear_thinking_keep_turns=2") == EditingPolicy(
        tool_results_trigger=5, thinking_keep_turns=2
    )
    assert policy_from_query(None) == policy_from_query("") == NO_EDITING
    for query, field in (
        ("clear_thinking_keep_turns=0", "clear_thinking_keep_turns"),
        ("clear_tool_results_trigger=-1", "clear_tool_results_trigger"),
        ("clear_tool_results_trigger=x", "clear_tool_results_trigger"),
        ("clear_tool_results=1", "clear_tool_results"),
    ):
        with pytest.raises(EditingParameterError) as e:
            policy_from_query(query)
        assert e.value.field == field, query


def _inflated(history: list[MessageAppended], sizes: list[int]) -> list[MessageAppended]:
    """``history`` with its tool results made large (an agent's file reads), each its own size."""
    return [_large(m, sizes[i % len(sizes)]) if m.role == "tool" else m for i, m in enumerate(history)]


def _large(m: MessageAppended, size: int) -> MessageAppended:
    text = f"{m.message_id} " + "data " * size
    if m.api is None:
        return replace(m, content=text)
    return native_message(
        message_id=m.message_id,
        role="tool",
        blocks=[TextBlock(text)],
        api=m.api,
        tool_call_id=m.tool_call_id,
        is_error=m.is_error,
    )


agent_conversations = st.builds(_inflated, conversations(), st.lists(st.integers(0, 400), min_size=1, max_size=5))

policies = st.builds(
    EditingPolicy,
    tool_results_trigger=st.none() | st.integers(0, 600),
    tool_results_keep=st.integers(0, 4),
    tool_results_at_least=st.integers(0, 400),
    tool_results_exclude=st.sampled_from([frozenset(), frozenset({"tool_0"})]),
    thinking_keep_turns=st.none() | st.integers(1, 3),
    thinking_at_least=st.integers(0, 50),
)


@pytest.mark.parametrize(("fmt", "model"), TARGETS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=agent_conversations, budget=st.integers(200, 5000), policy=policies)
def test_every_edited_context_is_valid_for_its_provider_and_the_same_every_time(
    fmt: str, model: str, history: list[MessageAppended], budget: int, policy: EditingPolicy
) -> None:
    try:
        ctx = context(history, policy, fmt=fmt, model=model, budget=budget, reasoning="tool_turns")
    except ContextBudgetExceededError:
        return
    validate_with_sdk(fmt, ctx.fragment)  # and assemble checked the format's own rules
    assert context(history, policy, fmt=fmt, model=model, budget=budget, reasoning="tool_turns") == ctx
    served_ids = {u.split(":")[0] for u, _ in ctx.units}
    by_id: dict[str, StoredMessage] = {m.message_id: stored(m, i) for i, m in enumerate(history)}
    for edit in ctx.edits:
        assert edit.cleared_tokens > 0
        assert set(edit.messages) <= served_ids
        for message_id in edit.messages:
            m = by_id[message_id]
            assert m.role == ("tool" if edit.kind == "clear_tool_results" else "assistant")
            assert f"{message_id}:" in " ".join(u for u, _ in ctx.units)
    if any(e.kind == "clear_tool_results" for e in ctx.edits):
        assert PLACEHOLDER in json.dumps(ctx.fragment)
    try:
        plain = context(history, NO_EDITING, fmt=fmt, model=model, budget=budget, reasoning="tool_turns")
    except ContextBudgetExceededError:
        return
    if not ctx.edits:
        assert ctx.fragment == plain.fragment
    elif plain.dropped_turns == ctx.dropped_turns and ctx.estimate is None:  # the same turns, less the edits
        assert ctx.token_count == plain.token_count - sum(e.cleared_tokens for e in ctx.edits)


@settings(max_examples=40, deadline=None)
@given(history=agent_conversations, policy=policies)
def test_an_edit_once_made_stays_as_the_conversation_goes_on(
    history: list[MessageAppended], policy: EditingPolicy
) -> None:
    """The edits of a conversation are those of any earlier point of it, and more."""
    users = [i for i, m in enumerate(history) if m.role == "user"]
    earlier: set[str] = set()
    for end in [*users[1:], len(history)]:
        ctx = context(history[:end], policy, model="claude-sonnet-4-5", fmt="anthropic")
        now = {m for e in ctx.edits for m in e.messages}
        assert earlier <= now
        earlier = now
