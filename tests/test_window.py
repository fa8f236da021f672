"""The window policy and event folding, as pure functions (no servers)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.codec import default_codec
from events.errors import ConfigurationError
from events.event_types import (
    ConversationCleared,
    ConversationErased,
    Event,
    EventBody,
    MessageAppended,
    MessageRedacted,
    ToolCall,
)
from events.keys import ConversationKey
from events.log import LogRecord
from projectors.changes import TranscriptRow
from projectors.context_range import SummaryAt
from projectors.fold import BatchInputs, BatchOutcome, decode_batch, fold_batch
from projectors.state import ConversationState, MessageAt
from projectors.tool_calls import FLAG_DUPLICATE_TOOL_RESULT, FLAG_UNKNOWN_TOOL_CALL
from projectors.turns import starts_turn
from projectors.window import Window, WindowPolicy, on_user_message

KEY = ConversationKey("t", "u", "c")
CODEC = default_codec()
T0 = datetime(2026, 11, 30, tzinfo=UTC)


def test_default_policy_keeps_twelve_then_drops_to_four() -> None:
    """The default (issue 16 item 5, bench/cache.py): the window moves once every nine turns —
    the prompt prefix is stable for eight of them — and holds 4 to 12 turns, 8 on average,
    as long as the 8→6 policy's contexts on average (6 to 8 turns, moving every third turn)."""
    policy = WindowPolicy()
    window = Window()
    starts = []
    for turn in range(13):
        window = on_user_message(window, turn * 2, policy)
        starts.append(window.start_seq)
    assert starts[:12] == [0] * 12  # the prefix stays put for twelve turns
    assert window.start_seq == 18  # the 13th turn drops down to the last four: turns 10..13 start at 18
    assert window.turn_starts == (18, 20, 22, 24)


@settings(max_examples=300, deadline=None)
@given(max_turns=st.integers(1, 16), keep=st.integers(1, 16), turns=st.integers(0, 80))
def test_the_window_moves_once_every_max_minus_keep_plus_one_turns(max_turns: int, keep: int, turns: int) -> None:
    """What the prompt cache depends on: the start moves only at a fold, forward by whole
    turns, first after ``max_turns`` turns and then every ``max_turns - keep_turns + 1``;
    between folds it holds; it never holds more than ``max_turns`` turns nor fewer than
    ``keep_turns`` once it folded."""
    policy = WindowPolicy(max_turns=max(max_turns, keep), keep_turns=min(max_turns, keep))
    period = policy.max_turns - policy.keep_turns + 1
    window = Window()
    folds = []
    for turn in range(turns):
        before = window
        window = on_user_message(window, turn * 3, policy)  # gaps: the assistant's messages
        assert window.turn_starts[-1] == turn * 3
        assert window.start_seq == window.turn_starts[0]
        assert len(window.turn_starts) <= policy.max_turns
        if before.start_seq is not None and window.start_seq != before.start_seq:
            assert window.start_seq > before.start_seq
            assert len(window.turn_starts) == policy.keep_turns
            folds.append(turn)
    expected = list(range(policy.max_turns, turns, period))
    assert folds == expected


@pytest.mark.parametrize(("max_turns", "keep_turns"), [(0, 0), (3, 4), (5, 0)])
def test_bad_policies_are_refused(max_turns: int, keep_turns: int) -> None:
    with pytest.raises(ConfigurationError):
        WindowPolicy(max_turns=max_turns, keep_turns=keep_turns)


# ---- random valid conversations --------------------------------------------------------------

op = st.one_of(
    st.just(("user",)),
    st.just(("assistant",)),
    st.tuples(st.just("assistant_calls"), st.integers(1, 3)),
    st.just(("answer",)),
    st.just(("interrupted",)),
    st.just(("system",)),
    st.just(("clear",)),
    st.just(("redact",)),
    st.just(("duplicate",)),
)
ops = st.lists(op, max_size=60)
# Half of them user messages: epochs long enough for the window to drop several times.
turn_ops = st.lists(st.tuples(st.booleans(), op), max_size=60).map(lambda ops: [("user",) if u else o for u, o in ops])


def build_events(script: list[tuple[object, ...]]) -> list[Event]:
    """A valid event sequence following the script; tool results answer open calls."""
    events: list[Event] = []
    open_calls: list[str] = []
    messages: list[str] = []
    for i, op in enumerate(script):
        body: EventBody
        kind = op[0]
        mid = f"m{i}"
        if kind == "user":
            body = MessageAppended(mid, "user", f"question {i}")
        elif kind == "assistant":
            body = MessageAppended(mid, "assistant", f"answer {i}", finish_reason="stop")
        elif kind == "assistant_calls":
            calls = tuple(ToolCall(f"call{i}_{j}", "lookup", "{}") for j in range(int(str(op[1]))))
            open_calls = [c.id for c in calls]
            body = MessageAppended(mid, "assistant", None, tool_calls=calls, finish_reason="tool_calls")
        elif kind == "answer" and open_calls:
            body = MessageAppended(mid, "tool", "result", tool_call_id=open_calls.pop(0))
        elif kind == "interrupted":
            body = MessageAppended(mid, "assistant", "half", finish_reason="interrupted")
        elif kind == "system":
            body = MessageAppended(mid, "system", "be brief")
        elif kind == "clear":
            body = ConversationCleared()
        elif kind == "redact" and messages:
            body = MessageRedacted(messages[-1], "pii")
        elif kind == "duplicate" and events:
            events.append(events[-1])  # a double-submit: the same event id again
            continue
        else:
            continue
        if isinstance(body, MessageAppended):
            messages.append(mid)
            if body.role in ("user", "assistant") and kind != "assistant_calls":
                open_calls = []
        events.append(Event(f"e{i}", KEY, T0 + timedelta(seconds=i), "test", body))
    return events


def as_records(events: list[Event]) -> list[LogRecord]:
    return [LogRecord(0, offset, KEY.encode(), CODEC.encode(e), T0) for offset, e in enumerate(events)]


def fold_in_batches(
    records: list[LogRecord], cuts: list[int], policy: WindowPolicy
) -> tuple[list[BatchOutcome], ConversationState | None]:
    """Fold batch after batch, carrying state like the store does between transactions."""
    state: ConversationState | None = None
    seen: set[tuple[str, str]] = set()
    known: dict[tuple[str, str], list[MessageAt]] = {}
    outcomes = []
    bounds = sorted({0, len(records), *(c for c in cuts if 0 < c < len(records))})
    for start, stop in itertools.pairwise(bounds):
        decoded = decode_batch(records[start:stop], codec=CODEC, max_event_bytes=1 << 20)
        states = {str(KEY): state} if state else {}
        out = fold_batch(
            decoded,
            BatchInputs(states, frozenset(), frozenset(seen), dict(known)),
            policy=policy,
            fail_fast=True,
        )
        state = out.states.get(str(KEY), state)
        seen.update(out.applied_event_ids)
        for r in out.transcript:
            at = MessageAt(r.seq, r.epoch, r.turn, starts_turn(r.role))
            known.setdefault((r.conversation_key, r.message_id), []).append(at)
        outcomes.append(out)
    return outcomes, state


class _NoHistory:
    """A conversation with nothing stored (the message path never asks)."""

    def rows(self, message_id: str) -> tuple[()]:
        return ()

    def summaries(self) -> tuple[()]:
        return ()

    def redacted(self) -> tuple[()]:
        return ()


policies = st.builds(lambda keep, extra: WindowPolicy(keep + extra, keep), st.integers(1, 4), st.integers(0, 4))


def turns_shown(n: int, policy: WindowPolicy) -> int:
    """How many of an epoch's ``n`` turns the window shows, by the policy's arithmetic: all of
    them up to ``max_turns``; then it drops to ``keep_turns`` and grows by one a turn up to
    ``max_turns`` again, a cycle of ``max_turns - keep_turns + 1`` turns."""
    if n <= policy.max_turns:
        return n
    return policy.keep_turns + (n - policy.max_turns - 1) % (policy.max_turns - policy.keep_turns + 1)


@settings(max_examples=150)
@given(turn_ops, policies)
def test_window_rules_hold_on_random_conversations(script: list[tuple[object, ...]], policy: WindowPolicy) -> None:
    """After every record, the folded window shows the newest turns of the current epoch, as
    many as the policy says: it starts at a user message and only moves forward."""
    records = as_records(build_events(script))
    outcomes, _ = fold_in_batches(records, list(range(1, len(records))), policy)  # a state per record
    rows: list[TranscriptRow] = []
    state: ConversationState | None = None
    for out in outcomes:
        rows += out.transcript
        state = out.states.get(str(KEY), state)
        if state is None:
            continue
        users = [r.seq for r in rows if r.role == "user" and r.epoch == state.epoch]
        shown = users[len(users) - turns_shown(len(users), policy) :]
        assert state.window.turn_starts == tuple(shown)
        assert state.window.start_seq == (shown[0] if shown else None)


@settings(max_examples=150)
@given(ops, policies, st.lists(st.integers(0, 70), max_size=6))
def test_folding_is_independent_of_batch_boundaries(
    script: list[tuple[object, ...]], policy: WindowPolicy, cuts: list[int]
) -> None:
    """Whatever batches a crash or a restart cuts the log into, the result is the same."""
    records = as_records(build_events(script))
    whole, final = fold_in_batches(records, [], policy)
    pieces, final_pieces = fold_in_batches(records, cuts, policy)
    assert [r for o in whole for r in o.transcript] == [r for o in pieces for r in o.transcript]
    assert [r for o in whole for r in o.redactions] == [r for o in pieces for r in o.redactions]
    assert final == final_pieces


def test_duplicate_event_ids_change_nothing() -> None:
    event = Event("e1", KEY, T0, "t", MessageAppended("m1", "user", "hi"))
    records = as_records([event, event, event])
    out, _ = fold_in_batches(records, [1, 2], WindowPolicy())
    assert sum(len(o.transcript) for o in out) == 1
    assert sum(o.duplicates for o in out) == 2


def test_foreign_tool_results_are_kept_flagged() -> None:
    calls = (ToolCall("a", "f", "{}"),)
    events = [
        Event("e0", KEY, T0, "t", MessageAppended("m0", "user", "q")),
        Event("e1", KEY, T0, "t", MessageAppended("m1", "assistant", None, tool_calls=calls)),
        Event("e2", KEY, T0, "t", MessageAppended("m2", "tool", "r", tool_call_id="a")),
        Event("e3", KEY, T0, "t", MessageAppended("m3", "tool", "again", tool_call_id="a")),
        Event("e4", KEY, T0, "t", MessageAppended("m4", "tool", "who?", tool_call_id="never-made")),
    ]
    rows = fold_in_batches(as_records(events), [], WindowPolicy())[0][0].transcript
    assert [r.flag for r in rows] == [None, None, None, FLAG_DUPLICATE_TOOL_RESULT, FLAG_UNKNOWN_TOOL_CALL]


def test_interrupted_tool_calls_cannot_be_answered() -> None:
    calls = (ToolCall("a", "f", '{"x'),)
    events = [
        Event("e0", KEY, T0, "t", MessageAppended("m0", "user", "q")),
        Event(
            "e1",
            KEY,
            T0,
            "t",
            MessageAppended("m1", "assistant", "I'll", tool_calls=calls, finish_reason="interrupted"),
        ),
        Event("e2", KEY, T0, "t", MessageAppended("m2", "tool", "r", tool_call_id="a")),
    ]
    rows = fold_in_batches(as_records(events), [], WindowPolicy())[0][0].transcript
    assert rows[2].flag == FLAG_UNKNOWN_TOOL_CALL


def test_poison_parks_only_its_conversation_and_holds_its_later_records() -> None:
    other = ConversationKey("t", "u", "other")
    good = Event("e0", KEY, T0, "t", MessageAppended("m0", "user", "q"))
    later = Event("e2", KEY, T0, "t", MessageAppended("m2", "user", "q2"))
    neighbour = Event("e3", other, T0, "t", MessageAppended("m3", "user", "hello"))
    records = [
        LogRecord(0, 0, KEY.encode(), CODEC.encode(good), T0),
        LogRecord(0, 1, KEY.encode(), CODEC.encode(good)[:-3], T0),  # truncated Avro
        LogRecord(0, 2, KEY.encode(), CODEC.encode(later), T0),
        LogRecord(0, 3, other.encode(), CODEC.encode(neighbour), T0),
        LogRecord(0, 4, KEY.encode(), CODEC.encode(replace(later, event_id="e4")), T0),
    ]
    out = fold_batch(
        decode_batch(records, codec=CODEC, max_event_bytes=1 << 20), BatchInputs({}), policy=WindowPolicy()
    )
    assert [(p.record.offset, p.conversation_key, p.error_code) for p in out.poisoned] == [
        (1, str(KEY), "corrupt_record")
    ]
    assert [r.offset for _, r in out.held] == [2, 4]
    assert [r.message_id for r in out.transcript] == ["m0", "m3"]


@pytest.mark.parametrize(
    ("after_the_check", "applies"),
    [
        ([], True),  # nothing happened since retention judged the conversation idle
        (["user"], False),  # the user came back in between: the erase is void
        (["duplicate"], True),  # a redelivered event is not applied, so it does not count
    ],
)
def test_a_conditional_erase_applies_only_if_nothing_was_applied_after_its_offset(
    after_the_check: list[str], applies: bool
) -> None:
    events = [
        Event("e0", KEY, T0, "t", MessageAppended("m0", "user", "old question")),
        Event("e1", KEY, T0, "t", MessageAppended("m1", "assistant", "old answer", finish_reason="stop")),
    ]
    for what in after_the_check:
        events.append(
            events[1] if what == "duplicate" else Event("e2", KEY, T0, "t", MessageAppended("m2", "user", "back"))
        )
    events.append(Event("e9", KEY, T0, "t", ConversationErased("retention", only_if_last_offset=1)))
    [out], state = fold_in_batches(as_records(events), [], WindowPolicy())
    assert state is not None
    assert [e.offset for e in out.erasures] == ([len(events) - 1] if applies else [])
    assert (state.erased_at is not None, state.epoch) == (applies, 1 if applies else 0)
    assert state.last_at == (0, len(events) - 1)  # applied either way: it happened
    unconditional = fold_in_batches(
        as_records([*events[:-1], Event("e9", KEY, T0, "t", ConversationErased())]), [], WindowPolicy()
    )
    assert len(unconditional[0][0].erasures) == 1


@pytest.mark.parametrize("fail_fast", [False, True])
def test_a_record_skipped_before_is_skipped_again_instead_of_parking_or_failing(fail_fast: bool) -> None:
    """A rebuild or verify replay honours the skips an operator made in the live version."""
    good = Event("e0", KEY, T0, "t", MessageAppended("m0", "user", "q"))
    later = Event("e2", KEY, T0, "t", MessageAppended("m2", "user", "q2"))
    records = [
        LogRecord(0, 0, KEY.encode(), CODEC.encode(good), T0),
        LogRecord(0, 1, KEY.encode(), b"\xc3\x01garbage", T0),
        LogRecord(0, 2, KEY.encode(), CODEC.encode(later), T0),
    ]
    decoded = decode_batch(records, codec=CODEC, max_event_bytes=1 << 20)
    out = fold_batch(decoded, BatchInputs({}, skips={(0, 1): "ticket 42"}), policy=WindowPolicy(), fail_fast=fail_fast)
    assert [(p.record.offset, reason) for p, reason in out.skipped] == [(1, "ticket 42")]
    assert (out.poisoned, out.held) == ([], [])
    assert [r.message_id for r in out.transcript] == ["m0", "m2"]
    # a skip names exact coordinates: the same garbage elsewhere is still poison
    elsewhere = fold_batch(decoded, BatchInputs({}, skips={(1, 1): "other partition"}), policy=WindowPolicy())
    assert [p.record.offset for p in elsewhere.poisoned] == [1]


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (b"\xc3\x01" + b"\x00" * 8 + b"junk", "unknown_schema"),
        (b"x" * 2048, "event_too_large"),
    ],
)
def test_poison_kinds_are_named(value: bytes, code: str) -> None:
    records = [LogRecord(3, 17, KEY.encode(), value, T0)]
    out = fold_batch(decode_batch(records, codec=CODEC, max_event_bytes=1024), BatchInputs({}), policy=WindowPolicy())
    assert [(p.record.partition, p.record.offset, p.error_code) for p in out.poisoned] == [(3, 17, code)]


def test_a_redaction_of_an_unknown_message_is_a_recorded_no_op_not_a_parked_conversation() -> None:
    """A redaction of nothing (a message id the conversation never had) must not park the
    conversation: the messages, the clear and the erase after it are applied."""
    events = [
        Event("e0", KEY, T0, "t", MessageAppended(message_id="m0", role="user", content="hi")),
        Event("e1", KEY, T0, "t", MessageRedacted("nope", "pii")),
        Event("e2", KEY, T0, "t", MessageAppended(message_id="m2", role="user", content="later")),
        Event("e3", KEY, T0, "t", ConversationErased(reason="gdpr")),
    ]
    out = fold_batch(
        decode_batch(as_records(events), codec=CODEC, max_event_bytes=1 << 20),
        BatchInputs({}),
        policy=WindowPolicy(),
    )
    assert (out.poisoned, out.held, out.redactions) == ([], [], [])
    assert [e for _, e in out.applied_event_ids] == ["e0", "e1", "e2", "e3"]  # its event id is taken
    assert [r.message_id for r in out.transcript] == ["m0", "m2"]
    assert [e.before_seq for e in out.erasures] == [2]
    assert out.states[str(KEY)].erased_at == T0


@pytest.mark.parametrize("role", ["user", "assistant", "tool", "system"])
def test_a_message_changes_only_the_fields_a_message_moves(role: str) -> None:
    """The message path builds the new state field by field (no dataclasses.replace): a field
    added to ConversationState later must not be reset by it."""
    from dataclasses import fields  # noqa: PLC0415

    from events.log import Coordinates  # noqa: PLC0415
    from projectors.state import apply_event  # noqa: PLC0415

    state = ConversationState(
        KEY,
        exists=True,
        title="kept",
        metadata={"k": "v"},
        started_at=T0,
        last_activity_at=T0,
        last_event_at=T0,
        message_count=5,
        turn_count=2,
        next_seq=7,
        epoch=3,
        clear_count=2,
        erased_at=T0,
        open_tool_calls=("c1",),
        answered_tool_calls=("c0",),
        window=Window(2, (2, 4)),
        last_at=(1, 40),
        first_offset=10,
        summary=SummaryAt(5, 3, 3, 1),
        turns_before_epoch=1,
        redacted_questions=(4,),
        key_id="ck_00000000000000000000000000000001",
    )
    assert all(getattr(state, f.name) != f.default for f in fields(state) if f.name not in ("key", "metadata"))
    body = MessageAppended(
        message_id="m",
        role=role,
        content="hi",
        tool_call_id="c1" if role == "tool" else None,
        finish_reason="stop" if role == "assistant" else None,
    )
    later = T0 + timedelta(minutes=1)
    new, _ = apply_event(
        state, Event("e", KEY, later, "p", body), Coordinates(1, 41), policy=WindowPolicy(), history=_NoHistory()
    )
    moved = {"last_event_at", "message_count", "next_seq", "last_at"}
    moved |= {"open_tool_calls", "answered_tool_calls"} if role in ("user", "assistant", "tool") else set()
    moved |= {"turn_count", "last_activity_at", "window"} if role == "user" else set()
    for f in fields(state):
        if f.name in moved:
            assert getattr(new, f.name) != getattr(state, f.name), f.name
        else:
            assert getattr(new, f.name) == getattr(state, f.name), f.name
    assert (new.last_event_at, new.message_count, new.next_seq, new.last_at) == (later, 6, 8, (1, 41))


def test_an_erase_is_never_held_behind_a_poisoned_record() -> None:
    """Behind a poison of the same batch, the erase skips it and applies the held records, then
    itself (so it erases them too); behind a conversation parked before, it is held and named
    for the store to release."""
    first = Event("e0", KEY, T0, "t", MessageAppended(message_id="m0", role="user", content="hi"))
    message = Event("e2", KEY, T0, "t", MessageAppended(message_id="m2", role="user", content="my card is 4111"))
    erase = Event("e3", KEY, T0, "t", ConversationErased(reason="gdpr"))
    records = [
        LogRecord(0, 0, KEY.encode(), CODEC.encode(first), T0),
        LogRecord(0, 1, KEY.encode(), b"\xc3\x01garbage", T0),
        LogRecord(0, 2, KEY.encode(), CODEC.encode(message), T0),
        LogRecord(0, 3, KEY.encode(), CODEC.encode(erase), T0),
    ]
    decoded = decode_batch(records, codec=CODEC, max_event_bytes=1 << 20)
    out = fold_batch(decoded, BatchInputs({}), policy=WindowPolicy())
    assert (out.poisoned, out.held, out.superseding) == ([], [], {})
    assert [(p.record.offset, reason) for p, reason in out.skipped] == [
        (1, "skipped for the erase at partition 0, offset 3: an erase or a clear is never held behind a parked record")
    ]
    assert [r.message_id for r in out.transcript] == ["m0", "m2"]
    assert [e.before_seq for e in out.erasures] == [2]
    parked_before = fold_batch(decoded[2:], BatchInputs({}, parked=frozenset({str(KEY)})), policy=WindowPolicy())
    assert ([r.offset for _, r in parked_before.held], list(parked_before.superseding)) == ([2, 3], [str(KEY)])
