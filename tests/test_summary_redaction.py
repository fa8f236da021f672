"""A redacted message leaves every read model — summaries included: a summary recorded before the
redaction that covers the message is withdrawn, live, in a rebuild and in ``as_of`` contexts."""

from __future__ import annotations

import pytest

from events.embedded_log import EmbeddedEventLog
from events.event_types import SummaryRecorded
from events.keys import ConversationKey
from events.producer import Appended, ConversationProducer
from pgstore.reads import PostgresReadModels
from pgstore.versions import compare
from query_api.as_of import context_inputs_as_of
from query_api.ports import ContextInputs
from tests.projection_support import SEED_000_WINDOW, Projection, project_all

pytestmark = pytest.mark.postgres

KEY = ConversationKey("acme", "u1", "secrets")


async def turns(producer: ConversationProducer, n: int) -> None:
    await producer.append_system(KEY, "Be brief.")
    for t in range(1, n + 1):
        await producer.append_user(KEY, f"Q{t}: my secret is S{t}", message_id=f"u{t}")
        await producer.append_assistant(KEY, f"A{t}", message_id=f"a{t}")


async def record(producer: ConversationProducer, summary_id: str, covers: str, text: str) -> Appended:
    return await producer.append(
        KEY, SummaryRecorded(summary_id, text, covers, "test-model", "v1"), event_id=summary_id
    )


async def live(projection: Projection) -> ContextInputs:
    inputs = await PostgresReadModels(projection.pool, schema=projection.version.schema).context_inputs(
        KEY, encoding="o200k_base"
    )
    assert inputs is not None
    return inputs


async def as_of(log: EmbeddedEventLog, offset: int) -> ContextInputs:
    inputs = await context_inputs_as_of(
        log, KEY, offset, encoding="o200k_base", policy=SEED_000_WINDOW, max_event_bytes=1 << 20
    )
    assert inputs is not None
    return inputs


async def test_a_redaction_withdraws_the_summaries_that_cover_the_message(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await turns(producer, 10)  # turns 1-3 left the window (8, then 6)
    early = await record(producer, "s-early", "a1", "Q1 told S1.")  # covers turn 1 only
    leaky = await record(producer, "s-leaky", "a3", "Q1 told S1. Q2 told S2. Q3 told S3.")
    redaction = await producer.redact(KEY, "u2", reason="user request")
    await project_all(log, projection.store(policy=SEED_000_WINDOW))

    inputs = await live(projection)
    assert inputs.summary is not None
    assert inputs.summary.summary_id == "s-early"  # s-leaky repeated S2: withdrawn; s-early did not cover u2
    texts = dict(await projection.rows("SELECT summary_id, text FROM {s}.summaries"))
    assert texts == {"s-early": "Q1 told S1.", "s-leaky": None}
    # The turns after the remaining summary are served raw again; the redacted question is not.
    assert [m.message_id for m in inputs.messages][:4] == ["u2", "a2", "u3", "a3"]
    assert inputs.messages[0].redacted
    assert inputs.messages[0].content is None

    # A summary recorded after the redaction (it could not have seen the content) stays.
    redo = await record(producer, "s-redo", "a3", "Q1 told S1. Q3 told S3.")
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    inputs = await live(projection)
    assert inputs.summary is not None
    assert inputs.summary.summary_id == "s-redo"
    assert inputs.messages[0].message_id == "u4"
    statuses = await PostgresReadModels(projection.pool, schema=projection.version.schema).summaries(KEY)
    assert [(e["summary_id"], e["status"]) for e in statuses or []] == [
        ("s-early", "superseded"),
        ("s-leaky", "withdrawn"),
        ("s-redo", "current"),
    ]

    # as_of: even the past is served without the redacted content.
    before_redaction = await as_of(log, leaky.offset)
    assert before_redaction.summary is not None
    assert before_redaction.summary.summary_id == "s-early"
    assert (await as_of(log, early.offset)).summary.summary_id == "s-early"  # type: ignore[union-attr]
    assert (await as_of(log, redo.offset)).summary.summary_id == "s-redo"  # type: ignore[union-attr]
    assert redaction.offset < redo.offset

    # A rebuild agrees, whatever its batches.
    rebuilt = await projection.new_version()
    await project_all(log, projection.store(schema=rebuilt.schema, policy=SEED_000_WINDOW), batch_size=3)
    async with projection.pool.connection() as conn:
        assert await compare(conn, projection.version.schema, rebuilt.schema) == []


@pytest.mark.parametrize("restart", ["clear", "erase"])
async def test_a_summary_landing_after_a_clear_or_erase_stays_with_the_old_epoch(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer, restart: str
) -> None:
    """The summarizer read the old epoch, the user started a new chat (or erased it) while the
    model was writing: the late summary must not become the new epoch's summary."""
    await turns(producer, 10)
    await (producer.clear(KEY) if restart == "clear" else producer.erase(KEY))
    await producer.append_user(KEY, "A new question", message_id="fresh")
    late = await record(producer, "s-late", "a3", "Q1 told S1. Q2 told S2. Q3 told S3.")
    await project_all(log, projection.store(policy=SEED_000_WINDOW))

    inputs = await live(projection)
    assert inputs.summary is None
    assert [m.message_id for m in inputs.messages] == ["fresh"]
    assert await projection.rows("SELECT text FROM {s}.summaries") == [(None,)]
    statuses = await PostgresReadModels(projection.pool, schema=projection.version.schema).summaries(KEY)
    assert [e["status"] for e in statuses or []] == ["withdrawn"]
    assert (await as_of(log, late.offset)).summary is None
    rebuilt = await projection.new_version()
    await project_all(log, projection.store(schema=rebuilt.schema, policy=SEED_000_WINDOW), batch_size=2)
    async with projection.pool.connection() as conn:
        assert await compare(conn, projection.version.schema, rebuilt.schema) == []


async def test_a_summary_written_from_a_read_before_a_redaction_is_withdrawn(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    """The redaction lands while the summary model is writing: the summary comes after it in the
    log, so no later redaction withdraws it — but it does not list the message as left out."""
    await turns(producer, 10)
    await producer.redact(KEY, "u2", reason="user request")
    stale = SummaryRecorded("s-stale", "Q1 told S1. Q2 told S2.", "a3", "m", "v", excluded_message_ids=())
    await producer.append(KEY, stale, event_id="s-stale")
    aware = SummaryRecorded("s-aware", "Q1 told S1. Q3 told S3.", "a3", "m", "v", excluded_message_ids=("u2",))
    last = await producer.append(KEY, aware, event_id="s-aware")
    await project_all(log, projection.store(policy=SEED_000_WINDOW))

    statuses = await PostgresReadModels(projection.pool, schema=projection.version.schema).summaries(KEY)
    assert [(e["summary_id"], e["status"]) for e in statuses or []] == [
        ("s-stale", "withdrawn"),
        ("s-aware", "current"),
    ]
    assert (await as_of(log, last.offset)).summary.summary_id == "s-aware"  # type: ignore[union-attr]
    assert (await as_of(log, last.offset - 1)).summary is None  # s-stale is not served even as it was
    rebuilt = await projection.new_version()
    await project_all(log, projection.store(schema=rebuilt.schema, policy=SEED_000_WINDOW), batch_size=1)
    async with projection.pool.connection() as conn:
        assert await compare(conn, projection.version.schema, rebuilt.schema) == []
