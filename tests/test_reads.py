"""The query API's reads of the read models, on real Postgres fed from the embedded log:
context inputs (window, summary, epochs, tokens per encoding), the conversation list and the
audit transcript with their paging, parked conversations, query plans and error conversion."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql

from convlog.demo.data import OA_SYSTEM_PROMPT, OA_TURNS
from convlog.demo.run import append_oa_conversation, append_tools_conversation
from events.embedded_log import EmbeddedEventLog
from events.event_types import SummaryRecorded
from events.keys import MAX_KEY_PART_LENGTH, ConversationKey
from events.producer import ConversationProducer
from pgstore.pool import open_pool
from pgstore.reads import PostgresReadModels
from projectors.errors import ProjectionError, StoreUnavailableError
from projectors.tokens import ENCODINGS, TokenCounter, text_counter
from query_api.ports import MAX_CURSOR_CHARS, ContextInputs, decode_cursor, encode_cursor
from tests.projection_support import SEED_000_WINDOW, Projection, project_all

OA = ConversationKey("acme", "employee-42", "oa")
TOOLS = ConversationKey("acme", "employee-42", "tools")
UNKNOWN = ConversationKey("acme", "employee-42", "never-started")


@pytest.fixture
def reads(projection: Projection) -> PostgresReadModels:
    return PostgresReadModels(projection.pool, schema=projection.version.schema)


def count(encoding: str, text: str) -> int:
    return text_counter(encoding)(text)


async def context(reads: PostgresReadModels, key: ConversationKey, encoding: str = "o200k_base") -> ContextInputs:
    inputs = await reads.context_inputs(key, encoding=encoding)
    assert inputs is not None
    return inputs


def summary(covers: str | None, summary_id: str = "s1", text: str = "They discussed overtime.") -> SummaryRecorded:
    return SummaryRecorded(
        summary_id=summary_id, text=text, covers_through_message_id=covers or "", model="offline", prompt_version="v1"
    )


@pytest.mark.postgres
async def test_the_oa_context_without_a_summary_keeps_every_turn_of_the_epoch(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer, reads: PostgresReadModels
) -> None:
    done = await append_oa_conversation(producer, OA)
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    inputs = await context(reads, OA)
    assert (inputs.conversation_key, inputs.epoch, inputs.parked, inputs.summary) == (OA, 0, False, None)
    assert (inputs.partition, inputs.last_offset) == (done[-1].partition, done[-1].offset)
    assert [(m.seq, m.role, m.content) for m in inputs.system] == [(0, "system", OA_SYSTEM_PROMPT)]
    assert inputs.window_start == 7  # as in test_projection: the window moved, but no summary covers turns 1-3
    assert [m.seq for m in inputs.messages] == list(range(1, 21))
    assert [m.content for m in inputs.messages] == [text for turn in OA_TURNS for text in turn]
    assert [m.message_id for m in inputs.messages] == [d.message_id for d in done[2:]]
    first = inputs.messages[0]
    assert (first.role, first.tool_calls, first.redacted, first.erased, first.flag) == ("user", (), False, False, None)


@pytest.mark.postgres
@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
async def test_token_counts_are_those_of_the_requested_encoding(
    projection: Projection,
    log: EmbeddedEventLog,
    producer: ConversationProducer,
    reads: PostgresReadModels,
    encoding: str,
) -> None:
    done = await append_oa_conversation(producer, OA)
    await producer.append(OA, summary(done[3].message_id, text="用户问了加班申请和审批流程。"))
    await append_tools_conversation(producer, TOOLS)
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    oa, tools = await context(reads, OA, encoding), await context(reads, TOOLS, encoding)
    for m in (*oa.system, *oa.messages):
        assert m.tokens == count(encoding, m.content)
    assert oa.summary is not None
    assert oa.summary.tokens == count(encoding, "用户问了加班申请和审批流程。")
    calls = next(m for m in tools.messages if m.tool_calls)
    assert isinstance(calls.tool_calls[0], dict)
    text = "\n".join(p for c in calls.tool_calls for p in (c["function"]["name"], c["function"]["arguments"]))
    assert calls.tokens == count(encoding, text)
    assert [m.role for m in tools.messages] == ["user", "assistant", "tool", "tool", "assistant", "user", "assistant"]
    assert tools.messages[-1].finish_reason == "interrupted"
    with pytest.raises(ValueError, match="unknown encoding"):
        await reads.context_inputs(OA, encoding="p50k_base")


@pytest.mark.postgres
async def test_a_stored_count_is_used_and_a_missing_one_is_counted_when_read(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer, reads: PostgresReadModels
) -> None:
    """Rows projected while CONVLOG_TOKEN_ENCODINGS named cl100k_base keep their counts and a
    context uses them; rows projected since (o200k_base only) are counted when read."""
    await producer.append_user(OA, "提交之后审批流程是怎样的？")
    await producer.append_assistant(OA, "先由驻场负责人确认。", reasoning_content="先想一想。", finish_reason="stop")
    await project_all(log, projection.store(counter=TokenCounter(encodings=ENCODINGS)))
    await producer.append_user(OA, "然后呢？")
    await project_all(log, projection.store())  # the default: o200k_base only
    stored = await projection.rows(
        "SELECT seq, tokens_cl100k, reasoning_tokens_cl100k FROM {s}.transcript ORDER BY seq"
    )
    assert stored == [
        (0, count("cl100k_base", "提交之后审批流程是怎样的？"), 0),
        (1, count("cl100k_base", "先由驻场负责人确认。"), count("cl100k_base", "先想一想。")),
        (2, None, None),
    ]
    await projection.execute("UPDATE {s}.transcript SET tokens_cl100k = 999 WHERE seq = 0")  # marks the stored one
    inputs = await context(reads, OA, "cl100k_base")
    assert [(m.tokens, m.reasoning_tokens) for m in inputs.messages] == [
        (999, 0),
        stored[1][1:],
        (count("cl100k_base", "然后呢？"), 0),
    ]
    assert [m.tokens for m in (await context(reads, OA)).messages] == [
        count("o200k_base", text) for text in ("提交之后审批流程是怎样的？", "先由驻场负责人确认。", "然后呢？")
    ]


@pytest.mark.postgres
async def test_a_summary_moves_the_start_after_its_coverage_but_never_past_the_window(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer, reads: PostgresReadModels
) -> None:
    done = await append_oa_conversation(producer, OA)  # done[i] has seq i - 1
    await producer.append(OA, summary(done[5].message_id))  # covers through seq 4 (turns 1-2)
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    inputs = await context(reads, OA)
    assert inputs.summary is not None
    assert (inputs.summary.summary_id, inputs.summary.covers_through_seq) == ("s1", 4)
    assert (inputs.window_start, [m.seq for m in inputs.messages]) == (7, list(range(5, 21)))

    # A later summary covering more than the window dropped: the window start bounds it.
    await producer.append(OA, summary(done[13].message_id, summary_id="s2", text="Longer."))  # seq 12
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    inputs = await context(reads, OA)
    assert inputs.summary is not None
    assert (inputs.summary.summary_id, inputs.summary.text, inputs.summary.covers_through_seq) == ("s2", "Longer.", 12)
    assert [m.seq for m in inputs.messages] == list(range(7, 21))
    assert [m.seq for m in inputs.system] == [0]

    # A summary whose text is gone (withdrawn: a redaction of a message it covers) is never
    # served: the previous one is. (The fold decides which one; the read takes its choice.)
    await producer.redact(OA, done[10].message_id, reason="pii")  # covered by s2, not by s1
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    inputs = await context(reads, OA)
    assert inputs.summary is not None
    assert inputs.summary.summary_id == "s1"


@pytest.mark.postgres
async def test_after_a_clear_only_the_new_epoch_is_in_the_context_and_system_messages_stay(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer, reads: PostgresReadModels
) -> None:
    done = await append_oa_conversation(producer, OA)
    await producer.append(OA, summary(done[5].message_id))
    await producer.clear(OA)
    again = await producer.append_user(OA, "again")
    answer = await producer.append_assistant(OA, "yes")
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    inputs = await context(reads, OA)
    assert (inputs.epoch, inputs.summary) == (1, None)  # the old epoch's summary restarts too
    assert [m.message_id for m in inputs.messages] == [again.message_id, answer.message_id]
    assert inputs.window_start == inputs.messages[0].seq
    assert [m.content for m in inputs.system] == [OA_SYSTEM_PROMPT]  # any epoch
    assert inputs.last_offset == answer.offset

    await producer.erase(OA, reason="gdpr")
    after = await producer.append_user(OA, "a new start")
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    inputs = await context(reads, OA)
    assert [(m.content, m.erased) for m in inputs.system] == [(None, True)]  # the assembler skips it
    assert (inputs.epoch, [m.message_id for m in inputs.messages]) == (2, [after.message_id])


@pytest.mark.postgres
async def test_a_poison_record_parks_the_conversation(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer, reads: PostgresReadModels
) -> None:
    await producer.append_user(OA, "first")
    await log.append(key=OA.encode(), value=b"\xc3\x01garbage")
    await producer.append_user(OA, "held behind it")
    await producer.append_user(TOOLS, "a neighbour")
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    oa, tools = await context(reads, OA), await context(reads, TOOLS)
    assert (oa.parked, [m.content for m in oa.messages]) == (True, ["first"])
    assert not tools.parked
    items, _ = await reads.list_conversations("acme", "employee-42")
    assert {i.conversation_id: i.parked for i in items} == {"oa": True, "tools": False}


@pytest.mark.postgres
async def test_unknown_conversations_existence_and_positions(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer, reads: PostgresReadModels
) -> None:
    done = await append_oa_conversation(producer, OA)
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    assert await reads.context_inputs(UNKNOWN, encoding="o200k_base") is None
    assert await reads.transcript(UNKNOWN) is None
    assert (await reads.conversation_exists(OA), await reads.conversation_exists(UNKNOWN)) == (True, False)
    partition = done[-1].partition
    assert await reads.projection_position(partition) == done[-1].offset + 1
    assert await reads.projection_position(99) == 0
    assert await reads.transcript(OA, before=0) == ([], None)  # known, nothing that old


@pytest.mark.postgres
async def test_the_transcript_pages_backwards_and_each_page_is_oldest_first(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer, reads: PostgresReadModels
) -> None:
    done = await append_oa_conversation(producer, OA)
    await producer.redact(OA, done[2].message_id or "", reason="pii")
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    pages, before = [], None
    while True:
        page = await reads.transcript(OA, limit=8, before=before)
        assert page is not None
        entries, before = page
        pages.append([e["seq"] for e in entries])
        if before is None:
            break
        assert before == entries[0]["seq"]
    assert pages == [list(range(13, 21)), list(range(5, 13)), list(range(5))]
    whole = await reads.transcript(OA, limit=21)
    assert whole is not None
    assert whole[1] is None
    assert [e["seq"] for e in whole[0]] == list(range(21))
    assert (await reads.transcript(OA, limit=20) or ([], -1))[1] == 1

    entries = whole[0]
    json.dumps(entries)  # ready for JSON
    system, redacted, answer = entries[0], entries[1], entries[2]
    assert (system["role"], system["content"], system["redacted"], system["erased_at"]) == (
        "system",
        OA_SYSTEM_PROMPT,
        None,
        None,
    )
    # CONVLOG_TOKEN_ENCODINGS' default stores o200k_base counts only: the audit shows the others as null
    assert system["tokens"] == {"o200k_base": count("o200k_base", OA_SYSTEM_PROMPT), "cl100k_base": None}
    assert (system["partition"], system["offset"], system["event_id"]) == (
        done[1].partition,
        done[1].offset,
        done[1].event_id,
    )
    assert datetime.fromisoformat(system["occurred_at"]).tzinfo is not None
    assert redacted["content"] is None
    assert redacted["redacted"]["reason"] == "pii"
    assert datetime.fromisoformat(redacted["redacted"]["at"]).tzinfo is not None
    assert (answer["model"], answer["finish_reason"], answer["epoch"], answer["metadata"]) == (
        "gpt-4o-mini",
        "stop",
        0,
        {},
    )
    assert set(answer) == {
        "seq",
        "partition",
        "offset",
        "event_id",
        "message_id",
        "role",
        "content",
        "name",
        "tool_calls",
        "tool_call_id",
        "reasoning_content",
        "thinking_duration_ms",
        "finish_reason",
        "model",
        "usage",
        "metadata",
        "occurred_at",
        "epoch",
        "flag",
        "tokens",
        "redacted",
        "erased_at",
    }
    with pytest.raises(ValueError, match="limit"):
        await reads.transcript(OA, limit=0)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.mark.postgres
async def test_conversations_are_listed_by_last_user_activity_with_a_cursor(
    projection: Projection, log: EmbeddedEventLog, reads: PostgresReadModels
) -> None:
    clock = Clock()
    producer = ConversationProducer(log, producer="test", clock=clock)
    user: Callable[[str], ConversationKey] = lambda c: ConversationKey("acme", "u1", c)  # noqa: E731

    async def at(minute: int, key: ConversationKey, role: str = "user") -> None:
        clock.now = datetime(2025, 3, 1, 9, minute, tzinfo=UTC)
        if role == "user":
            await producer.append_user(key, f"hello at {minute}")
        else:
            await producer.append_system(key, "a prompt, no user yet")

    await at(1, user("b-old"))
    await at(2, user("z-tie"))
    await at(2, user("a-tie"))
    await at(3, user("b-old"), role="system")  # not user activity: b-old stays oldest
    await at(4, user("idle-2"), role="system")
    await at(5, user("idle-1"), role="system")
    await producer.clear(user("a-tie"))
    await producer.erase(user("z-tie"))
    await at(9, ConversationKey("acme", "u2", "someone-else"))
    await at(9, ConversationKey("other-tenant", "u1", "same-user-id"))
    await project_all(log, projection.store(policy=SEED_000_WINDOW))

    expected = ["a-tie", "z-tie", "b-old", "idle-1", "idle-2"]
    for limit in (1, 2, 3, 5, 50):
        listed, before, pages = [], None, 0
        while True:
            items, before = await reads.list_conversations("acme", "u1", limit=limit, before=before)
            listed += [i.conversation_id for i in items]
            pages += 1
            if before is None:
                break
        assert listed == expected
        assert pages == -(-len(expected) // limit)

    items, _ = await reads.list_conversations("acme", "u1")
    tie, erased, old, idle = items[0], items[1], items[2], items[3]
    assert (tie.cleared, tie.erased, tie.message_count, tie.turn_count) == (True, False, 1, 1)
    assert (erased.cleared, erased.erased) == (False, True)
    assert old.last_activity_at == datetime(2025, 3, 1, 9, 1, tzinfo=UTC)
    assert old.started_at == datetime(2025, 3, 1, 9, 1, tzinfo=UTC)
    assert (idle.last_activity_at, idle.turn_count, idle.message_count, idle.parked) == (None, 0, 1, False)
    assert await reads.list_conversations("acme", "nobody") == ([], None)


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "not base64!",
        b64("not json"),
        b64('["2025-03-01T09:00:00", "x"]'),  # a naive timestamp
        b64('["yesterday", "x"]'),
        b64("[1, 2]"),
        b64('[null, ""]'),
        b64("{}"),
        b64(json.dumps([None, "x"]))[:-1] + "\u00e9",
        "a" * 5000,
    ],
)
async def test_a_malformed_cursor_is_a_value_error(cursor: str) -> None:
    reads = PostgresReadModels(None, schema="s")  # type: ignore[arg-type]  # never reached
    with pytest.raises(ValueError, match="malformed conversation list cursor"):
        await reads.list_conversations("acme", "u1", before=cursor)


@given(
    ts=st.none() | st.datetimes(timezones=st.just(UTC)),
    conversation_id=st.text(min_size=1, max_size=256),
)
def test_cursors_round_trip(ts: datetime | None, conversation_id: str) -> None:
    cursor = encode_cursor(ts, conversation_id)
    assert cursor.isascii()
    assert "=" not in cursor
    assert decode_cursor(cursor) == (ts, conversation_id)


def test_the_longest_cursor_fits_the_limit() -> None:
    longest = encode_cursor(datetime(2025, 3, 1, 9, 0, 0, 123456, tzinfo=UTC), "\U0001f600" * MAX_KEY_PART_LENGTH)
    assert len(longest) <= 1450 <= MAX_CURSOR_CHARS
    assert decode_cursor(longest)[1] == "\U0001f600" * MAX_KEY_PART_LENGTH


@pytest.mark.postgres
async def test_context_statements_use_the_indexes_for_a_conversation_among_many(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer, reads: PostgresReadModels
) -> None:
    done = await append_oa_conversation(producer, OA)
    await producer.append(OA, summary(done[5].message_id))  # the head then looks up what it covers
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    # Filler rows straight into the table: 400 other conversations of 40 messages each.
    await projection.execute(
        'INSERT INTO {s}.transcript (conversation_key, seq, partition, "offset", event_id, message_id, role, '
        "content, metadata, occurred_at, epoch, turn, image_count, tokens_o200k, tokens_cl100k, "
        "reasoning_tokens_o200k, reasoning_tokens_cl100k) "
        "SELECT 'acme:filler:' || c, s, 0, c * 100 + s, 'e' || c || '-' || s, 'm' || c || '-' || s, "
        "CASE WHEN s = 0 THEN 'system' WHEN mod(s, 2) = 1 THEN 'user' ELSE 'assistant' END, "
        "to_jsonb(repeat('filler text ', 20)), '{{}}', now(), 0, s / 2, 0, 40, 40, 0, 0 "
        "FROM generate_series(1, 400) c, generate_series(0, 39) s"
    )
    await projection.execute("ANALYZE {s}.transcript")
    inputs = await context(reads, OA)
    k = str(OA)
    assert inputs.summary is not None
    # One statement: the head by its primary key (its window and current summary by theirs: the
    # row names the summary and where the range starts, the fold's decisions), the system
    # messages by their partial index, the range by the primary key.
    for n in (3, None):
        async with projection.pool.connection() as conn:
            cur = await conn.execute(b"EXPLAIN " + reads._context["o200k_base"], {"k": k, "n": n})
            plan = "\n".join(row[0] for row in await cur.fetchall())
        assert "Seq Scan" not in plan, plan
        for index in (
            "conversations_pkey",
            "windows_pkey",
            "summaries_pkey",
            "transcript_system_messages",
            "transcript_pkey",
        ):
            assert index in plan, plan


@pytest.mark.postgres
async def test_the_list_reads_the_activity_index_from_the_cursor_on(
    projection: Projection, reads: PostgresReadModels
) -> None:
    # 30 users with 2000 conversations each, one in ten never active; straight into the table.
    await projection.execute(
        "INSERT INTO {s}.conversations SELECT 'acme:u' || u || ':c' || c, 'acme', 'u' || u, 'c' || c, NULL, '{{}}', "
        "now(), CASE WHEN mod(c, 10) <> 0 THEN now() - c * interval '1 minute' END, now(), 1, 1, 1, 0, 0, NULL, "
        "'{{}}', '{{}}', 0, 0, 0, NULL, NULL, NULL, 0, '{{}}', 0, 1 "
        "FROM generate_series(1, 30) u, generate_series(1, 2000) c"
    )
    await projection.execute("ANALYZE {s}.conversations")
    middle = datetime.now(UTC) - timedelta(minutes=1000)
    for ts, active_after, idle_after in ((middle, "c1000", ""), (None, "", "c10")):
        params = {
            "tenant": "acme",
            "user": "u3",
            "ts": ts,
            "active_after": active_after,
            "idle_after": idle_after,
            "n": 51,
        }
        async with projection.pool.connection() as conn:
            cur = await conn.execute(sql.SQL("EXPLAIN (ANALYZE, COSTS OFF) ") + reads._list, params)
            plan = "\n".join(row[0] for row in await cur.fetchall())
        assert "Seq Scan on conversations" not in plan, plan
        assert "conversations_by_activity" in plan, plan
        assert "rows=200" not in plan, plan  # reads a page, not the whole user (1800 active, 200 idle)
    items, before = await reads.list_conversations("acme", "u3", limit=1000)
    rest, last = await reads.list_conversations("acme", "u3", limit=1000, before=before)
    assert (len(items), len(rest), last) == (1000, 1000, None)
    assert (items[-1].conversation_id, rest[0].conversation_id) == ("c1111", "c1112")
    assert [i.last_activity_at for i in rest[-200:]] == [None] * 200


@pytest.mark.postgres
async def test_driver_errors_become_convlog_errors(projection: Projection, reads: PostgresReadModels) -> None:
    missing = PostgresReadModels(projection.pool, schema="convlog_read_models_v99")
    with pytest.raises(ProjectionError, match="42P01") as caught:
        await missing.conversation_exists(OA)
    assert not caught.value.retriable
    with pytest.raises(ProjectionError, match="42P01"):
        await missing.context_inputs(OA, encoding="o200k_base")  # fails inside the pipeline
    pool = await open_pool(projection.url, max_size=1, acquire_timeout_s=0.2, name="convlog-test-busy")
    try:
        busy = PostgresReadModels(pool, schema=projection.version.schema)
        async with pool.connection():  # the only connection is taken: the next caller times out
            with pytest.raises(StoreUnavailableError):
                await busy.context_inputs(OA, encoding="o200k_base")
    finally:
        await pool.close()
    closed = PostgresReadModels(pool, schema=projection.version.schema)
    with pytest.raises(ProjectionError, match="closed"):
        await closed.projection_position(0)
    assert (await reads.list_conversations("acme", "employee-42")) == ([], None)


@pytest.mark.postgres
async def test_a_context_read_on_a_connection_postgres_dropped_is_retriable_and_the_pool_recovers(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    """The context read runs in autocommit and puts the connection back as it found it; on a
    connection that broke under it, that must not hide the retriable error."""
    await append_oa_conversation(producer, OA)
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    pool = await open_pool(projection.url, max_size=1, name="convlog-test-dropped")
    try:
        reads = PostgresReadModels(pool, schema=projection.version.schema)
        assert await reads.context_inputs(OA, encoding="o200k_base") is not None
        async with pool.connection() as conn:
            pid = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone() or [0])[0]
        async with projection.pool.connection() as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        with pytest.raises(StoreUnavailableError):  # the connection was handed out a moment ago: not checked
            await reads.context_inputs(OA, encoding="o200k_base")
        inputs = await reads.context_inputs(OA, encoding="o200k_base")  # a new connection
        assert inputs is not None
        assert len(inputs.messages) == 20
        async with pool.connection() as conn:
            assert not conn.autocommit
    finally:
        await pool.close()


async def test_arguments_are_checked_before_any_query() -> None:
    reads = PostgresReadModels(None, schema="s")  # type: ignore[arg-type]  # never reached
    with pytest.raises(ValueError, match="between 1 and 1000"):
        await reads.list_conversations("t", "u", limit=1001)
    with pytest.raises(ValueError, match="between 1 and 1000"):
        await reads.transcript(OA, limit=0)
    with pytest.raises(ValueError, match="unknown encoding"):
        await reads.context_inputs(OA, encoding="gpt2")
