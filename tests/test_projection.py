"""Projections on real Postgres, fed from the embedded log: rows, idempotency, fencing,
poison handling, erasure and rebuilds."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from convlog.demo.run import append_oa_conversation, append_tools_conversation
from convlog.jobs.export import ExportFilter, export_transcripts
from events.blocks import blocks_from_json, blocks_to_json, reasoning_text
from events.codec import EventCodec
from events.embedded_log import EmbeddedEventLog
from events.event_types import SummaryRecorded
from events.keys import ConversationKey
from events.producer import ConversationProducer
from events.strict_json import compact_json
from pgstore.parked_rows import skip_decisions
from pgstore.store import PIPELINED_BATCH
from pgstore.versions import compare
from projectors.errors import PositionConflictError, ProjectionError
from projectors.tokens import TokenCounter, get_encoding
from tests.native_support import NATIVE_SECRETS, thinking_answer, tool_result
from tests.projection_support import SEED_000_WINDOW, Projection, project_all
from tests.test_schema_evolution import future_schema_dir

pytestmark = pytest.mark.postgres

OA = ConversationKey("acme", "employee-42", "oa")
TOOLS = ConversationKey("acme", "employee-42", "tools")


async def test_the_demo_conversations_become_read_models(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await append_oa_conversation(producer, OA)
    await append_tools_conversation(producer, TOOLS)
    await project_all(log, projection.store(policy=SEED_000_WINDOW))  # ten turns move it once

    oa = await projection.rows(
        "SELECT message_count, turn_count, title, next_seq FROM {s}.conversations WHERE conversation_key = %s",
        str(OA),
    )
    assert oa == [(21, 10, "OA 加班申请", 21)]
    # Ten turns with max 8 / keep 6: the ninth turn moved the window to turn 4 (seq 7).
    window = await projection.rows(
        "SELECT start_seq, turn_starts FROM {s}.windows WHERE conversation_key = %s", str(OA)
    )
    assert window == [(7, [7, 9, 11, 13, 15, 17, 19])]
    roles = await projection.rows(
        "SELECT role FROM {s}.transcript WHERE conversation_key = %s ORDER BY seq", str(TOOLS)
    )
    assert [r for (r,) in roles] == ["system", "user", "assistant", "tool", "tool", "assistant", "user", "assistant"]
    listed = await projection.rows(
        "SELECT conversation_id FROM {s}.conversations WHERE tenant_id = 'acme' AND user_id = 'employee-42' "
        "ORDER BY last_activity_at DESC"
    )
    assert [c for (c,) in listed] == ["tools", "oa"]


@pytest.mark.parametrize("counted", [("o200k_base",), ("o200k_base", "cl100k_base"), ("cl100k_base",)])
async def test_token_counts_equal_tiktoken_on_the_same_text_in_the_counted_encodings_only(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer, counted: tuple[str, ...]
) -> None:
    """CONVLOG_TOKEN_ENCODINGS: the projector stores counts in the encodings it names, NULL in
    the others (a context for a model on one of them counts its messages when read)."""
    await append_tools_conversation(producer, TOOLS)
    await project_all(log, projection.store(counter=TokenCounter(encodings=counted)))
    rows = await projection.rows(
        "SELECT content, tool_calls, reasoning_content, tokens_o200k, tokens_cl100k, reasoning_tokens_o200k, "
        "reasoning_tokens_cl100k FROM {s}.transcript ORDER BY seq"
    )
    o200k, cl100k = get_encoding("o200k_base"), get_encoding("cl100k_base")
    assert any(reasoning for _, _, reasoning, *_ in rows)
    for content, calls, reasoning, t_o200k, t_cl100k, r_o200k, r_cl100k in rows:
        parts = [content] if isinstance(content, str) else []
        for call in calls or ():
            parts += [call["function"]["name"], call["function"]["arguments"]]
        text = "\n".join(parts)
        o200k_counted, cl100k_counted = "o200k_base" in counted, "cl100k_base" in counted
        assert t_o200k == (len(o200k.encode_ordinary(text)) if o200k_counted else None)
        assert t_cl100k == (len(cl100k.encode_ordinary(text)) if cl100k_counted else None)
        assert r_o200k == (len(o200k.encode_ordinary(reasoning or "")) if o200k_counted else None)
        assert r_cl100k == (len(cl100k.encode_ordinary(reasoning or "")) if cl100k_counted else None)


async def test_every_committed_batch_records_its_latency(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await append_tools_conversation(producer, TOOLS)
    projector = await project_all(log, projection.store(), batch_size=3)
    latency = projector.stats.latency
    assert sum(latency.counts) == projector.stats.batches > 1
    assert 0 < latency.total_s < 60 * projector.stats.batches  # seconds since these records were appended


async def test_a_repeated_event_id_changes_nothing(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    for _ in range(3):
        await producer.append_user(OA, "double click", event_id="click-1")
    await project_all(log, projection.store())
    assert await projection.rows("SELECT count(*) FROM {s}.transcript") == [(1,)]


async def test_redelivery_and_zombies_change_nothing(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await append_oa_conversation(producer, OA)
    store = projection.store()
    records = list((await log.read(dict.fromkeys(range(4), 0), timeout_s=0)).records)
    partition = records[0].partition
    stored = await store.positions([partition])
    await store.apply(records, stored)
    before = await _checksums(projection)
    # The same batch again (a redelivery after a crash between commit and ack) ...
    with pytest.raises(PositionConflictError):
        await store.apply(records, stored)
    # ... or a zombie that still believes it owns the partition from an older position.
    zombie = projection.store()
    with pytest.raises(PositionConflictError):
        await zombie.apply(records[5:], {partition: 5})
    assert await _checksums(projection) == before
    assert await store.positions([partition]) == {partition: records[-1].offset + 1}


async def test_poison_parks_its_conversation_and_release_applies_held_records_in_order(
    projection: Projection, log: EmbeddedEventLog, tmp_path: Path
) -> None:
    # A producer with a newer schema writes records this build cannot decode yet.
    future = EventCodec(future_schema_dir(tmp_path))
    old_producer = ConversationProducer(log, producer="old")
    new_producer = ConversationProducer(log, producer="new", codec=future)
    await old_producer.append_user(OA, "first")
    await new_producer.append_user(OA, "from the future")  # poison for this build
    await old_producer.append_user(OA, "after it")
    await old_producer.append_user(TOOLS, "a neighbour")
    await project_all(log, projection.store())

    letters = await projection.rows(
        'SELECT id, partition, "offset", conversation_key, error_code, status FROM {s}.dead_letters'
    )
    assert len(letters) == 1
    letter_id, partition, offset, key, code, status = letters[0]
    assert (partition, offset, key, code, status) == (letters[0][1], 1, str(OA), "unknown_schema", "parked")
    assert await projection.rows("SELECT conversation_key FROM {s}.parked") == [(str(OA),)]
    assert await projection.rows('SELECT "offset" FROM {s}.held_records') == [(2,)]
    texts = await projection.rows("SELECT conversation_key, content FROM {s}.transcript ORDER BY conversation_key")
    assert texts == [(str(OA), "first"), (str(TOOLS), "a neighbour")]  # the neighbour went on

    # Releasing with the old code fails and changes nothing; with the new schema it applies.
    with pytest.raises(ProjectionError, match="still fails"):
        await projection.store().resolve(letter_id)
    report = await projection.store(codec=future).resolve(letter_id)
    assert report.applied == 2
    rows = await projection.rows(
        "SELECT seq, content FROM {s}.transcript WHERE conversation_key = %s ORDER BY seq", str(OA)
    )
    assert rows == [(0, "first"), (1, "from the future"), (2, "after it")]
    assert await projection.rows("SELECT count(*) FROM {s}.parked") == [(0,)]
    assert await projection.rows("SELECT status FROM {s}.dead_letters") == [("released",)]


async def test_skipping_a_dead_letter_records_why_and_applies_the_rest(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await producer.append_user(OA, "first")
    await log.append(key=OA.encode(), value=b"\xc3\x01garbage")
    await producer.append_user(OA, "after it")
    await project_all(log, projection.store())
    [(letter_id,)] = await projection.rows("SELECT id FROM {s}.dead_letters")
    await projection.store().resolve(letter_id, skip_reason="written by a broken client, ticket 42")
    assert await projection.rows("SELECT status, resolution FROM {s}.dead_letters") == [
        ("skipped", "written by a broken client, ticket 42")
    ]
    rows = await projection.rows("SELECT content FROM {s}.transcript ORDER BY seq")
    assert rows == [("first",), ("after it",)]


@pytest.mark.parametrize("kind", ["erase", "clear"])
@pytest.mark.parametrize("batch_size", [1, 1000])  # parked in an earlier batch; in the same one, by COPY
async def test_an_erase_or_a_clear_is_never_held_behind_a_parked_record(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer, kind: str, batch_size: int
) -> None:
    """It is applied at once, to the records held before it too: the record that parked the
    conversation is skipped with a reason naming it, the held ones applied, then it; a rebuild
    (which skips what the live version skipped) equals the live tables."""
    await producer.append_user(OA, "first")
    await log.append(key=OA.encode(), value=b"\xc3\x01garbage")
    await producer.append_user(OA, "my card is 4111")  # held behind the garbage
    done = await (producer.erase(OA, reason="gdpr") if kind == "erase" else producer.clear(OA))
    await producer.append_user(OA, "a new start")
    for i in range(PIPELINED_BATCH + 1):
        await producer.append_user(TOOLS, f"neighbour {i}")
    await project_all(log, projection.store(), batch_size=batch_size)
    assert await projection.rows("SELECT count(*) FROM {s}.parked") == [(0,)]
    assert await projection.rows("SELECT count(*) FROM {s}.held_records") == [(0,)]
    assert await projection.rows("SELECT status, resolution FROM {s}.dead_letters") == [
        (
            "skipped",
            f"skipped for the {kind} at partition {done.partition}, offset {done.offset}: an erase or a "
            "clear is never held behind a parked record",
        ),
    ]
    rows = await projection.rows(
        "SELECT content, epoch, erased_at IS NOT NULL FROM {s}.transcript WHERE conversation_key = %s ORDER BY seq",
        str(OA),
    )
    if kind == "erase":
        assert rows == [(None, 0, True), (None, 0, True), ("a new start", 1, False)]
        assert await projection.rows(
            "SELECT erased_at IS NOT NULL FROM {s}.conversations WHERE conversation_key = %s", str(OA)
        ) == [(True,)]
    else:
        assert rows == [("first", 0, False), ("my card is 4111", 0, False), ("a new start", 1, False)]
    rebuilt = await projection.new_version()
    async with projection.pool.connection() as conn:
        skips = await skip_decisions(conn, projection.version.schema)
    await project_all(log, projection.store(schema=rebuilt.schema, fail_fast=True, skips=skips), batch_size=1000)
    async with projection.pool.connection() as conn:
        assert await compare(conn, projection.version.schema, rebuilt.schema) == []


async def test_erasure_removes_content_everywhere_but_keeps_a_marker(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await append_tools_conversation(producer, TOOLS)
    await producer.erase(TOOLS, reason="gdpr")
    await producer.append_user(TOOLS, "a new start")
    await project_all(log, projection.store())
    rows = await projection.rows(
        "SELECT content IS NULL, reasoning_content IS NULL, tool_calls IS NULL, erased_at IS NOT NULL "
        "FROM {s}.transcript ORDER BY seq"
    )
    assert rows[:-1] == [(True, True, True, True)] * (len(rows) - 1)
    assert rows[-1] == (False, True, True, False)
    assert await projection.rows("SELECT title, epoch FROM {s}.conversations") == [(None, 1)]


async def test_redaction_removes_the_message_content(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    secret = await producer.append_user(OA, "my id number is 12345")
    await producer.redact(OA, secret.message_id or "", reason="pii")
    await project_all(log, projection.store())
    assert await projection.rows("SELECT content, redaction_reason FROM {s}.transcript") == [(None, "pii")]


async def test_a_rebuild_equals_the_live_tables_and_a_corrupted_row_is_found(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await append_oa_conversation(producer, OA)
    await append_tools_conversation(producer, TOOLS)
    await producer.clear(OA)
    await producer.append_user(OA, "again")
    await project_all(log, projection.store(), batch_size=3)
    rebuilt = await projection.new_version()
    await project_all(log, projection.store(schema=rebuilt.schema, fail_fast=True), batch_size=1000)
    async with projection.pool.connection() as conn:
        assert await compare(conn, projection.version.schema, rebuilt.schema) == []
    tamper = "UPDATE {s}.transcript SET content = '\"tampered\"' WHERE seq = 3 AND conversation_key = %s"
    await projection.execute(tamper, str(OA))
    async with projection.pool.connection() as conn:
        assert await compare(conn, projection.version.schema, rebuilt.schema) == [("transcript", str(OA))]


async def test_the_event_index_is_compared_from_where_both_versions_index_every_record(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    """``convlog verify`` and ``rebuild --verify`` compare the event index (what audit reads and
    a repeated Idempotency-Key are answered from) like every other read model: a row lost from it
    is found. A version made before the index indexes from its positions then
    (``event_index_from``): compared from there, it equals a rebuild."""
    await append_oa_conversation(producer, OA)
    await project_all(log, projection.store())
    rebuilt = await projection.new_version()
    await project_all(log, projection.store(schema=rebuilt.schema, fail_fast=True), batch_size=1000)

    async def differing() -> list[tuple[str, str]]:
        async with projection.pool.connection() as conn:
            return await compare(conn, projection.version.schema, rebuilt.schema)

    assert await differing() == []
    await projection.execute('DELETE FROM {s}.event_index WHERE "offset" < 3')  # as if indexed from 3 on
    await projection.execute("INSERT INTO {s}.event_index_from SELECT DISTINCT partition, 3 FROM {s}.event_index")
    assert await differing() == []
    await projection.execute('DELETE FROM {s}.event_index WHERE "offset" = 4')
    assert await differing() == [("event_index", str(OA))]


async def test_small_batches_written_by_inserts_equal_large_ones_written_by_copy(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    """A batch of up to PIPELINED_BATCH records (what read-your-writes waits for) goes to
    Postgres as INSERTs in one pipeline, a larger one by COPY: the same rows either way, in every
    read model and the event index — native blocks, summaries, redactions and clears included."""
    oa = await append_oa_conversation(producer, OA)
    await append_tools_conversation(producer, TOOLS)
    await _native_conversation(producer)
    covered = oa[7].message_id or ""  # the third answer
    await producer.append(OA, SummaryRecorded("s1", "加班申请的审批流程", covered, "test-model", "v1"), event_id="s1")
    secret = await producer.append_user(OA, "my id number is 12345")
    await producer.redact(OA, secret.message_id or "", reason="pii")
    await producer.clear(TOOLS)
    await producer.append_user(TOOLS, "again")
    records = len(
        (await log.read(dict.fromkeys(range(log.partition_count), 0), max_records=10_000, timeout_s=0)).records
    )
    assert records > 2 * PIPELINED_BATCH  # the large batches below do take the COPY path
    await project_all(log, projection.store(), batch_size=1)
    copied = await projection.new_version()
    await project_all(log, projection.store(schema=copied.schema, fail_fast=True), batch_size=1000)
    async with projection.pool.connection() as conn:
        assert await compare(conn, projection.version.schema, copied.schema) == []
    index = 'SELECT conversation_key, event_id, partition, "offset" FROM {s}.event_index ORDER BY 3, 4'
    assert await projection.rows(index) == await projection.rows(index, schema=copied.schema)
    assert len(await projection.rows(index)) == records


async def _checksums(projection: Projection) -> object:
    from pgstore.versions import checksums  # noqa: PLC0415

    async with projection.pool.connection() as conn:
        return await checksums(conn, projection.version.schema)


NATIVE = ConversationKey("acme", "employee-42", "native")


async def _native_conversation(producer: ConversationProducer) -> None:
    await producer.append_user(NATIVE, "Weather in Paris and Oslo?", message_id="q1")
    await producer.append(NATIVE, thinking_answer("a1"))
    await producer.append(NATIVE, tool_result("toolu_1", "sunny", message_id="r1"))
    await producer.append(NATIVE, tool_result("toolu_2", "no such city", message_id="r2", is_error=True))


async def test_a_native_messages_blocks_are_stored_compact_and_a_chat_message_has_none(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await _native_conversation(producer)
    await project_all(log, projection.store())
    rows = await projection.rows(
        "SELECT blocks::text, provider, api, is_error, usage, reasoning_tokens_o200k FROM {s}.transcript ORDER BY seq"
    )
    assert rows[0] == (None, None, None, None, None, 0)  # the user's Chat Completions message: NULLs, small
    blocks, provider, api, is_error, usage, reasoning_tokens = rows[1]
    assert blocks == compact_json(blocks_to_json(thinking_answer().blocks))  # compact, only the fields set
    assert (provider, api, is_error, usage["cache_write_tokens"]) == ("anthropic", "anthropic", None, 150)
    assert reasoning_tokens == len(get_encoding("o200k_base").encode_ordinary(reasoning_text(thinking_answer().blocks)))
    assert rows[3][:4] == ('[{"type":"text","text":"no such city"}]', "anthropic", "anthropic", True)


async def test_a_redacted_native_message_keeps_no_signature_or_encrypted_reasoning_in_its_row(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await _native_conversation(producer)
    await producer.redact(NATIVE, "a1", reason="pii")
    await project_all(log, projection.store())
    [(row,)] = await projection.rows("SELECT t::text FROM {s}.transcript t WHERE message_id = 'a1'")
    assert [s for s in NATIVE_SECRETS if s in row] == []
    assert await projection.rows("SELECT blocks IS NULL, redaction_reason FROM {s}.transcript WHERE seq = 1") == [
        (True, "pii")
    ]


async def test_a_rebuild_of_native_messages_equals_the_live_tables_and_a_tampered_block_is_found(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await _native_conversation(producer)
    await producer.redact(NATIVE, "r1", reason="pii")
    await append_tools_conversation(producer, TOOLS)
    await project_all(log, projection.store(), batch_size=2)
    rebuilt = await projection.new_version()
    await project_all(log, projection.store(schema=rebuilt.schema, fail_fast=True), batch_size=1000)
    async with projection.pool.connection() as conn:
        assert await compare(conn, projection.version.schema, rebuilt.schema) == []
    tamper = """UPDATE {s}.transcript SET blocks = '[{{"type":"text","text":"x"}}]' """
    tamper += "WHERE seq = 3 AND conversation_key = %s"
    await projection.execute(tamper, str(NATIVE))
    async with projection.pool.connection() as conn:
        assert await compare(conn, projection.version.schema, rebuilt.schema) == [("transcript", str(NATIVE))]


async def test_the_export_keeps_a_native_messages_blocks_and_origin(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    """Retention archives are exports: a native message leaves the read models losslessly."""
    await _native_conversation(producer)
    await project_all(log, projection.store())
    out = io.StringIO()
    written = await export_transcripts(
        projection.pool, projection.version.schema, ExportFilter(tenant="acme"), out, progress=False
    )
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert written == len(lines) == 4
    assert lines[0]["blocks"] is None
    assert blocks_from_json(lines[1]["blocks"]) == thinking_answer().blocks
    assert (lines[1]["provider"], lines[1]["api"], lines[3]["is_error"]) == ("anthropic", "anthropic", True)
