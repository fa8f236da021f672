"""A withdrawn message (``MessagesWithdrawn``, schema v6) leaves what is served as a redacted one
does — the context's rows, the turn count, the summaries that cover it — and stays whole in the
audit transcript, marked; ``as_of`` before the withdrawal serves it, after it not; a rebuild
agrees, whatever its batches."""

from __future__ import annotations

import pytest

from events.embedded_log import EmbeddedEventLog
from events.event_types import SummaryRecorded
from events.keys import ConversationKey
from events.producer import ConversationProducer
from pgstore.reads import PostgresReadModels
from pgstore.versions import compare
from query_api.as_of import context_inputs_as_of
from query_api.ports import ContextInputs
from query_api.selection import usable
from tests.projection_support import SEED_000_WINDOW, Projection, project_all

pytestmark = pytest.mark.postgres

KEY = ConversationKey("acme", "u1", "undo")


async def turns(producer: ConversationProducer, n: int) -> None:
    await producer.append_system(KEY, "Be brief.")
    for t in range(1, n + 1):
        await producer.append_user(KEY, f"Q{t}", message_id=f"u{t}")
        await producer.append_assistant(KEY, f"A{t}", message_id=f"a{t}")


def reads(projection: Projection) -> PostgresReadModels:
    return PostgresReadModels(projection.pool, schema=projection.version.schema)


async def live(projection: Projection) -> ContextInputs:
    inputs = await reads(projection).context_inputs(KEY, encoding="o200k_base")
    assert inputs is not None
    return inputs


async def as_of(log: EmbeddedEventLog, offset: int) -> ContextInputs:
    inputs = await context_inputs_as_of(
        log, KEY, offset, encoding="o200k_base", policy=SEED_000_WINDOW, max_event_bytes=1 << 20
    )
    assert inputs is not None
    return inputs


def served(inputs: ContextInputs) -> list[str]:
    return [m.message_id for m in inputs.messages if usable(m)]


async def test_a_withdrawn_message_leaves_what_is_served_and_the_audit_keeps_it_whole(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await turns(producer, 3)
    before = await producer.append_user(KEY, "Q4: a question the app takes back", message_id="u4")
    withdrawal = await producer.withdraw(KEY, ["u4", "never-sent"], reason="pop_item")
    again = await producer.withdraw(KEY, ["u4"], reason="twice")  # changes nothing
    await project_all(log, projection.store(policy=SEED_000_WINDOW))

    inputs = await live(projection)
    assert served(inputs) == ["u1", "a1", "u2", "a2", "u3", "a3"]
    assert [(m.message_id, m.withdrawn) for m in inputs.messages][-1] == ("u4", True)
    state = await projection.rows("SELECT turn_count, usable_turns FROM {s}.conversations")
    assert state == [(4, 3)]  # the withdrawn question is no turn a context can serve

    page = await reads(projection).transcript(KEY)
    assert page is not None
    entry = page[0][-1]
    assert (entry["message_id"], entry["content"]) == ("u4", "Q4: a question the app takes back")
    assert entry["withdrawn"]["reason"] == "pop_item"  # the first withdrawal's: the second changed nothing
    assert entry["redacted"] is None

    # The log replays to the point asked: before the withdrawal the question was served.
    assert served(await as_of(log, before.offset))[-1] == "u4"
    assert served(await as_of(log, withdrawal.offset)) == served(inputs)
    assert await as_of(log, again.offset) == inputs

    rebuilt = await projection.new_version()
    await project_all(log, projection.store(schema=rebuilt.schema, policy=SEED_000_WINDOW), batch_size=2)
    async with projection.pool.connection() as conn:
        assert await compare(conn, projection.version.schema, rebuilt.schema) == []


async def test_a_withdrawal_withdraws_the_summaries_that_cover_the_message_but_not_in_the_past(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await turns(producer, 10)  # turns 1-3 left the window (8, then 6)
    early = SummaryRecorded("s-early", "Q1.", "a1", "test-model", "v1")
    await producer.append(KEY, early, event_id="s-early")
    covering = await producer.append(
        KEY, SummaryRecorded("s-covering", "Q1. Q2. Q3.", "a3", "test-model", "v1"), event_id="s-covering"
    )
    await producer.withdraw(KEY, ["u2", "a2"])
    await project_all(log, projection.store(policy=SEED_000_WINDOW))

    inputs = await live(projection)
    assert inputs.summary is not None
    assert inputs.summary.summary_id == "s-early"  # s-covering covered u2: withdrawn; s-early did not
    assert served(inputs)[:2] == ["u3", "a3"]  # raw again after s-early, without the withdrawn turn
    assert dict(await projection.rows("SELECT summary_id, text FROM {s}.summaries")) == {
        "s-early": "Q1.",
        "s-covering": None,
    }
    # Before the withdrawal, the summary it took was served (its content was never a secret).
    then = await as_of(log, covering.offset)
    assert then.summary is not None
    assert then.summary.summary_id == "s-covering"

    # A summary written after, that lists the withdrawn messages as left out, stays.
    redo = SummaryRecorded("s-redo", "Q1. Q3.", "a3", "test-model", "v1", excluded_message_ids=("u2", "a2"))
    await producer.append(KEY, redo, event_id="s-redo")
    stale = SummaryRecorded("s-stale", "Q1. Q2. Q3.", "a3", "test-model", "v1", excluded_message_ids=())
    await producer.append(KEY, stale, event_id="s-stale")  # read before the withdrawal: misses them
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    inputs = await live(projection)
    assert inputs.summary is not None
    assert inputs.summary.summary_id == "s-redo"
