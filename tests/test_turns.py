"""One definition of a turn (projectors.turns), and the window, context assembly and the
summarizer all splitting by it: one table of cases, run against the function and each user."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.event_types import Event, MessageAppended, ToolCall
from events.keys import ConversationKey
from projectors.tokens import message_cost
from projectors.turns import split_turns, split_turns_by, starts_turn
from projectors.window import WindowPolicy
from query_api.context import assemble
from query_api.context_types import ContextRequest, StoredMessage
from summarizer.offline_model import OfflineSummaryModel
from summarizer.plan import SummaryInputs, SummaryJob, plan
from summarizer.transcript import PendingMessage, render_turns
from tests.test_context import SPEC, Builder, count
from tests.test_window import T0, as_records, fold_in_batches

KEY = ConversationKey("t", "u", "c")


@dataclass(frozen=True)
class Case:
    name: str
    messages: tuple[str, ...]  # "<role>:<id>"; an assistant "a…" calls "c<id>", a tool "t<id>" answers it
    preamble: tuple[str, ...]  # ids
    turns: tuple[tuple[str, ...], ...]  # ids


CASES = [
    Case("empty", (), (), ()),
    Case("one question", ("user:u1",), (), (("u1",),)),
    Case("question and answer", ("user:u1", "assistant:a1"), (), (("u1", "a1"),)),
    Case("two turns", ("user:u1", "assistant:a1", "user:u2", "assistant:a2"), (), (("u1", "a1"), ("u2", "a2"))),
    Case("questions in a row", ("user:u1", "user:u2"), (), (("u1",), ("u2",))),
    Case("a greeting opens", ("assistant:g0", "user:u1", "assistant:a1"), ("g0",), (("u1", "a1"),)),
    Case("only a greeting", ("assistant:g0", "assistant:g1"), ("g0", "g1"), ()),
    Case(
        "a tool group stays in its turn",
        ("user:u1", "assistant:ax", "tool:tx", "assistant:a1", "user:u2", "assistant:a2"),
        (),
        (("u1", "ax", "tx", "a1"), ("u2", "a2")),
    ),
    Case("system messages are in no turn", ("system:s0", "user:u1", "system:s1", "assistant:a1"), (), (("u1", "a1"),)),
    Case("a system prompt before a greeting", ("system:s0", "assistant:g0", "user:u1"), ("g0",), (("u1",),)),
]
IDS = [c.name for c in CASES]


def role_and_id(message: str) -> tuple[str, str]:
    role, mid = message.split(":")
    return role, mid


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_split_turns(case: Case) -> None:
    split = split_turns_by(case.messages, lambda m: role_and_id(m)[0])
    assert tuple(role_and_id(m)[1] for m in split.preamble) == case.preamble
    assert tuple(tuple(role_and_id(m)[1] for m in turn) for turn in split.turns) == case.turns


def test_only_user_messages_start_turns() -> None:
    assert [r for r in ("system", "developer", "user", "assistant", "tool") if starts_turn(r)] == ["user"]


# ---- the same cases through each user of the definition -----------------------------------------


def events_of(case: Case) -> list[Event]:
    events = []
    for i, message in enumerate(case.messages):
        role, mid = role_and_id(message)
        if role == "assistant" and mid == "ax":
            body = MessageAppended(
                mid, role, "ax", tool_calls=(ToolCall("cx", "lookup", "{}"),), finish_reason="tool_calls"
            )
        elif role == "tool":
            body = MessageAppended(mid, role, mid, tool_call_id="c" + mid[1:])
        else:
            body = MessageAppended(mid, role, mid)
        events.append(Event(f"e{i}", KEY, T0 + timedelta(seconds=i), "test", body))
    return events


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_window_counts_the_same_turns(case: Case) -> None:
    """The projector's window holds a turn start at each turn's user message, and nowhere else."""
    outcomes, state = fold_in_batches(as_records(events_of(case)), [], WindowPolicy(100, 100))
    rows = [r for out in outcomes for r in out.transcript]
    seq_of = {r.message_id: r.seq for r in rows}
    expected = tuple(seq_of[turn[0]] for turn in case.turns)
    assert (state.window.turn_starts if state else ()) == expected
    assert split_turns(rows).turns == tuple(tuple(r for r in rows if r.message_id in t) for t in case.turns)


def stored_of(case: Case) -> list[StoredMessage]:
    b = Builder()
    for message in case.messages:
        role, mid = role_and_id(message)
        if role == "assistant" and mid == "ax":
            b.add(
                role,
                mid,
                tool_calls=[{"id": "cx", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}],
            )
        elif role == "tool":
            b.add(role, mid, tool_call_id="c" + mid[1:])
        else:
            b.add(role, mid)
    # as the read models hand them over: no system messages; the case's ids as message ids
    return [replace(m, message_id=m.content) for m in b.messages if m.role != "system"]


def pending_of(stored: list[StoredMessage]) -> tuple[PendingMessage, ...]:
    return tuple(PendingMessage(m.seq, m.message_id, m.role, m.content, m.tool_calls, m.tool_call_id) for m in stored)


def summarize_all(pending: tuple[PendingMessage, ...]) -> SummaryJob | None:
    """The job for a conversation whose every message has left the window."""
    return plan(SummaryInputs(KEY, 0, 10**6, None, pending), max_input_tokens=10**6, count=len)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_context_and_summarizer_split_the_same_turns(case: Case) -> None:
    stored = stored_of(case)
    context = assemble(
        system=[], summary=None, messages=stored, request=ContextRequest("gpt-4o", 100_000), spec=SPEC, count=count
    )
    # The context serves the turns, and not the preamble (rule 2: it opens with a user message).
    assert [m["content"] for m in context.messages] == [mid for turn in case.turns for mid in turn]
    job = summarize_all(pending_of(stored))
    if not case.turns:
        assert job is None  # a greeting alone is no turn that left the window
        return
    # The summarizer folds the same turns, the preamble in with the first one.
    assert job is not None
    assert job.turns == len(case.turns)
    assert job.covers_through_message_id == case.turns[-1][-1]
    by_id = {m.message_id: m for m in pending_of(stored)}
    assert job.lines == tuple(render_turns([by_id[i] for i in (*case.preamble, *(i for t in case.turns for i in t))]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["user", "assistant", "system"]), max_size=20), st.integers(1, 6))
def test_context_and_summarizer_count_the_same_turns(roles: list[str], budget_turns: int) -> None:
    """With a budget for the last ``budget_turns`` turns, the context drops as many turns as the
    summarizer would fold beyond them: both count turns alike."""
    b = Builder()
    for i, role in enumerate(roles):
        b.add(role, f"{role} {i}")
    stored = [m for m in b.messages if m.role != "system"]
    turns = split_turns(stored).turns
    kept = turns[-budget_turns:]
    cost = SPEC.reply_priming + sum(
        message_cost(m, SPEC, include_reasoning=False, keep_images=True, count=count) for t in kept for m in t
    )
    context = (
        assemble(
            system=[],
            summary=None,
            messages=stored,
            request=ContextRequest("gpt-4o", max(cost, 1)),
            spec=SPEC,
            count=count,
        )
        if turns
        else None
    )
    job = summarize_all(pending_of(stored))
    if not turns:
        assert job is None
        return
    assert context is not None
    assert job is not None
    assert context.dropped_turns == len(turns) - len(kept)
    assert job.turns == len(turns)
    served_questions = [m["content"] for m in context.messages if m["role"] == "user"]
    assert served_questions == [t[0].content for t in kept]


# ---- what the one definition changed for the summarizer -------------------------------------


def test_a_greeting_alone_before_the_window_is_not_summarized() -> None:
    """Before: the greeting was a turn of its own, so the first user message put a summary of it
    in every context although no turn had left the window."""
    pending = (PendingMessage(0, "g0", "assistant", "Hello! How can I help?"),)
    assert plan(SummaryInputs(KEY, 0, 1, None, pending), max_input_tokens=1000, count=len) is None


async def test_the_greeting_is_summarized_with_the_first_turn() -> None:
    pending = (
        PendingMessage(0, "g0", "assistant", "Hello! How can I help?"),
        PendingMessage(1, "u1", "user", "Book a flight"),
        PendingMessage(2, "a1", "assistant", "Booked."),
    )
    job = plan(SummaryInputs(KEY, 0, 3, None, pending), max_input_tokens=1000, count=len)
    assert job is not None
    assert (job.turns, job.covers_through_message_id) == (1, "a1")
    assert job.lines == ("Assistant: Hello! How can I help?", "User: Book a flight", "Assistant: Booked.")
    draft = await OfflineSummaryModel().summarize(job, max_tokens=200)
    assert draft.text.splitlines() == [
        "- Assistant: Hello! How can I help?",
        "- User: Book a flight — Assistant: Booked.",
    ]
