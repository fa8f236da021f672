"""The read-model contract: one suite, run unchanged against every adapter pair — Postgres
(PostgresProjectionStore + PostgresReadModels) and in memory (InMemoryProjectionStore +
InMemoryReadModels) — each fed from the embedded log by the projector, through the same fold.
The last test projects one mixed history into both and compares every answer."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from convlog.demo.data import OA_SYSTEM_PROMPT, OA_TURNS
from convlog.demo.run import append_oa_conversation
from events.blocks import TextBlock, blocks_to_json, reasoning_text
from events.codec import default_codec
from events.embedded_log import EmbeddedEventLog
from events.event_types import MessageAppended, SummaryRecorded
from events.keys import ConversationKey
from events.producer import ConversationProducer
from pgstore.reads import PostgresReadModels
from projectors.errors import PositionConflictError
from projectors.memory_store import InMemoryProjectionStore
from projectors.memory_tables import MemoryTables
from projectors.ports import ProjectionStore
from projectors.tokens import get_encoding
from query_api.memory_reads import InMemoryReadModels
from query_api.ports import ReadModels
from tests.native_support import NATIVE_SECRETS, thinking_answer, tool_result
from tests.projection_support import COUNTER, SEED_000_WINDOW, Projection, project_all, projection_database

OA = ConversationKey("acme", "employee-42", "oa")
TOOLS = ConversationKey("acme", "employee-42", "tools")
UNKNOWN = ConversationKey("acme", "employee-42", "never-started")
ENCODINGS = ("o200k_base", "cl100k_base")


@dataclass
class ReadSide:
    store: ProjectionStore
    reads: ReadModels


def in_memory() -> ReadSide:
    tables = MemoryTables()
    store = InMemoryProjectionStore(
        tables, codec=default_codec(), counter=COUNTER, policy=SEED_000_WINDOW, max_event_bytes=1 << 20
    )
    return ReadSide(store, InMemoryReadModels(tables))


def in_postgres(projection: Projection) -> ReadSide:
    reads = PostgresReadModels(projection.pool, schema=projection.version.schema)
    return ReadSide(projection.store(policy=SEED_000_WINDOW), reads)


@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.postgres)])
async def side(request: pytest.FixtureRequest) -> AsyncIterator[ReadSide]:
    """Every adapter pair of the read-model ports; the tests below run unchanged against each."""
    if request.param == "memory":
        yield in_memory()
    else:
        async with projection_database(request.getfixturevalue("pg_admin_url")) as projection:
            yield in_postgres(projection)


def count(encoding: str, text: str) -> int:
    return len(get_encoding(encoding).encode_ordinary(text))


def summary(covers: str | None, summary_id: str = "s1", text: str = "They discussed overtime.") -> SummaryRecorded:
    return SummaryRecorded(
        summary_id=summary_id, text=text, covers_through_message_id=covers or "", model="offline", prompt_version="v1"
    )


async def inputs_of(side: ReadSide, key: ConversationKey, encoding: str = "o200k_base") -> Any:
    inputs = await side.reads.context_inputs(key, encoding=encoding)
    assert inputs is not None
    return inputs


async def test_a_context_holds_the_epochs_messages_in_order_with_their_position(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    done = await append_oa_conversation(producer, OA)
    await project_all(log, side.store)
    inputs = await inputs_of(side, OA)
    assert (inputs.conversation_key, inputs.epoch, inputs.parked, inputs.summary) == (OA, 0, False, None)
    assert (inputs.partition, inputs.last_offset) == (done[-1].partition, done[-1].offset)
    assert [(m.seq, m.role, m.content) for m in inputs.system] == [(0, "system", OA_SYSTEM_PROMPT)]
    assert inputs.window_start == 7
    assert [m.content for m in inputs.messages] == [text for turn in OA_TURNS for text in turn]
    assert [m.message_id for m in inputs.messages] == [d.message_id for d in done[2:]]
    assert (inputs.complete, inputs.usable_turns) == (True, None)


@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_token_counts_are_the_requested_encodings(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer, encoding: str
) -> None:
    done = await append_oa_conversation(producer, OA)
    await producer.append(OA, summary(done[3].message_id, text="用户问了加班申请和审批流程。"))
    await project_all(log, side.store)
    inputs = await inputs_of(side, OA, encoding)
    assert [m.tokens for m in inputs.messages] == [count(encoding, m.content) for m in inputs.messages]
    assert inputs.summary.tokens == count(encoding, "用户问了加班申请和审批流程。")
    with pytest.raises(ValueError, match="unknown encoding"):
        await side.reads.context_inputs(OA, encoding="p50k_base")


async def test_a_summary_starts_the_context_after_what_it_covers(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    done = await append_oa_conversation(producer, OA)
    await producer.append(OA, summary(done[5].message_id))  # covers through seq 4
    await producer.append(OA, summary(done[13].message_id, summary_id="s2", text="Longer."))  # seq 12
    await project_all(log, side.store)
    inputs = await inputs_of(side, OA)
    assert (inputs.summary.summary_id, inputs.summary.covers_through_seq) == ("s2", 12)
    assert inputs.messages[0].seq == 7  # the window starts before what the summary covers
    entries = await side.reads.summaries(OA)
    assert [(e["summary_id"], e["status"]) for e in entries or []] == [("s1", "superseded"), ("s2", "current")]


async def test_newest_reads_only_the_newest_rows_and_says_what_the_range_offers(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    done = await append_oa_conversation(producer, OA)
    await producer.redact(OA, done[4].message_id or "", reason="pii")  # the question of turn 2
    await project_all(log, side.store)
    whole = await inputs_of(side, OA)
    part = await side.reads.context_inputs(OA, encoding="o200k_base", newest=3)
    assert part is not None
    assert part.messages == whole.messages[-3:]
    assert (part.complete, part.usable_turns) == (False, 10 - 1)
    enough = await side.reads.context_inputs(OA, encoding="o200k_base", newest=100)
    assert enough is not None
    assert (enough.messages, enough.complete) == (whole.messages, True)


async def test_a_redaction_empties_the_message_and_withdraws_the_summaries_that_cover_it(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    done = await append_oa_conversation(producer, OA)
    await producer.append(OA, summary(done[5].message_id))
    await producer.redact(OA, done[2].message_id or "", reason="pii")
    await project_all(log, side.store)
    inputs = await inputs_of(side, OA)
    redacted = inputs.messages[0]
    assert (redacted.content, redacted.redacted) == (None, True)
    assert inputs.summary is None
    assert [e["status"] for e in await side.reads.summaries(OA) or []] == ["withdrawn"]
    page = await side.reads.transcript(OA, limit=3, before=2)
    assert page is not None
    assert [(e["seq"], e["content"], e["redacted"] and e["redacted"]["reason"]) for e in page[0]] == [
        (0, OA_SYSTEM_PROMPT, None),
        (1, None, "pii"),
    ]


NATIVE = ConversationKey("acme", "employee-42", "native")


async def _native_turn(producer: ConversationProducer, key: ConversationKey = NATIVE) -> MessageAppended:
    await producer.append_user(key, "Weather in Paris and Oslo?", message_id="q1")
    answer = thinking_answer("a1")
    await producer.append(key, answer)
    await producer.append(key, tool_result("toolu_1", "sunny", message_id="r1"))
    await producer.append(key, tool_result("toolu_2", "no such city", message_id="r2", is_error=True))
    return answer


@pytest.mark.parametrize("encoding", ENCODINGS)
async def test_a_native_message_keeps_its_blocks_its_origin_and_its_usage(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer, encoding: str
) -> None:
    answer = await _native_turn(producer)
    await project_all(log, side.store)
    inputs = await inputs_of(side, NATIVE, encoding)
    question, stored, ok, failed = inputs.messages
    assert (question.blocks, question.api, question.provider, question.is_error) == ((), None, None, None)
    assert stored.blocks == answer.blocks  # every block, in order, byte for byte
    assert (stored.api, stored.provider, stored.model, stored.prompt_tokens) == (
        "anthropic",
        "anthropic",
        "claude-sonnet-4-5",
        1200,
    )
    # content and tool calls are the Chat Completions view; reasoning never enters it
    assert stored.content == "Let me check both cities."
    assert [c["id"] for c in stored.tool_calls] == ["toolu_1", "toolu_2"]
    assert stored.reasoning_content is None
    assert stored.reasoning_tokens == count(encoding, reasoning_text(answer.blocks)) > 0
    assert (ok.blocks, ok.is_error, ok.tool_call_id) == ((TextBlock("sunny"),), None, "toolu_1")
    assert (failed.is_error, failed.content) == (True, "no such city")

    page = await side.reads.transcript(NATIVE)
    assert page is not None
    entries = page[0]
    assert not {"blocks", "provider", "api", "is_error"} & entries[0].keys()  # a Chat Completions message
    assert entries[1]["blocks"] == blocks_to_json(answer.blocks)
    assert (entries[1]["provider"], entries[1]["api"]) == ("anthropic", "anthropic")
    assert entries[1]["usage"] == {
        "prompt_tokens": 1200,
        "completion_tokens": 80,
        "cached_tokens": 1000,
        "cache_write_tokens": 150,
    }
    assert entries[3]["is_error"] is True


async def test_a_redaction_and_an_erasure_leave_no_signature_or_encrypted_reasoning_behind(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    erased_key = ConversationKey("acme", "employee-42", "native-erased")
    await _native_turn(producer)
    await _native_turn(producer, erased_key)
    await producer.redact(NATIVE, "a1", reason="pii")
    await producer.erase(erased_key, reason="gdpr")
    await project_all(log, side.store)
    for key in (NATIVE, erased_key):
        inputs = await side.reads.context_inputs(key, encoding="o200k_base")
        transcript = await side.reads.transcript(key)
        everything = repr(inputs) + json.dumps(transcript, default=str)
        assert [s for s in NATIVE_SECRETS if s in everything] == [], key
    redacted = (await inputs_of(side, NATIVE)).messages[1]
    assert (redacted.blocks, redacted.content, redacted.tool_calls, redacted.redacted) == ((), None, (), True)
    page = await side.reads.transcript(NATIVE)
    assert page is not None
    assert "blocks" not in page[0][1]
    assert page[0][2]["blocks"] == [{"type": "text", "text": "sunny"}]  # the results are not redacted


async def test_a_summary_after_a_redaction_that_leaves_it_out_stays_and_the_first_reason_stays(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    done = await append_oa_conversation(producer, OA)
    redacted = done[2].message_id or ""
    await producer.redact(OA, redacted, reason="pii")
    await producer.redact(OA, redacted, reason="asked again")
    left_out = SummaryRecorded(
        summary_id="s1",
        text="Without it.",
        covers_through_message_id=done[5].message_id or "",
        model="m",
        prompt_version="v",
        excluded_message_ids=(redacted,),
    )
    await producer.append(OA, left_out)
    await project_all(log, side.store)  # one batch: the redactions come before the summary in it
    assert [e["status"] for e in await side.reads.summaries(OA) or []] == ["current"]
    page = await side.reads.transcript(OA, limit=1, before=2)
    assert page is not None
    assert [e["redacted"]["reason"] for e in page[0]] == ["pii"]


async def test_clear_and_erase_start_new_epochs_and_erase_empties_everything_before_it(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    done = await append_oa_conversation(producer, OA)
    await producer.append(OA, summary(done[5].message_id))
    await producer.clear(OA)
    again = await producer.append_user(OA, "again")
    await project_all(log, side.store)
    cleared = await inputs_of(side, OA)
    assert (cleared.epoch, cleared.summary, [m.message_id for m in cleared.messages]) == (1, None, [again.message_id])
    assert [e["status"] for e in await side.reads.summaries(OA) or []] == ["superseded"]
    await producer.erase(OA, reason="gdpr")
    after = await producer.append_user(OA, "a new start")
    await project_all(log, side.store)
    erased = await inputs_of(side, OA)
    assert [(m.content, m.erased) for m in erased.system] == [(None, True)]
    assert (erased.epoch, [m.message_id for m in erased.messages]) == (2, [after.message_id])
    assert [e["status"] for e in await side.reads.summaries(OA) or []] == ["erased"]
    items, _ = await side.reads.list_conversations("acme", "employee-42")
    assert [(i.conversation_id, i.erased, i.cleared) for i in items] == [("oa", True, True)]


async def test_a_poison_record_parks_its_conversation_only_until_an_erase(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await producer.append_user(OA, "first")
    garbage = await log.append(key=OA.encode(), value=b"\xc3\x01garbage")
    await producer.append_user(OA, "held behind it")
    await producer.append_user(TOOLS, "a neighbour")
    await project_all(log, side.store)
    oa, tools = await inputs_of(side, OA), await inputs_of(side, TOOLS)
    assert (oa.parked, [m.content for m in oa.messages]) == (True, ["first"])
    assert not tools.parked
    items, _ = await side.reads.list_conversations("acme", "employee-42")
    assert {i.conversation_id: i.parked for i in items} == {"oa": True, "tools": False}
    parked = await side.reads.parked_by(OA)
    assert parked is not None
    assert (parked.partition, parked.offset, parked.error_code) == (garbage.partition, garbage.offset, "corrupt_record")
    assert await side.reads.parked_by(TOOLS) is None
    # An erase is not held behind it: it releases the conversation and applies to the held ones too.
    await producer.erase(OA, reason="gdpr")
    await project_all(log, side.store)
    oa = await inputs_of(side, OA)
    assert (oa.parked, oa.messages, await side.reads.parked_by(OA)) == (False, (), None)
    page = await side.reads.transcript(OA)
    assert page is not None
    assert [(e["content"], e["erased_at"] is not None) for e in page[0]] == [(None, True), (None, True)]


async def test_a_repeated_event_id_is_applied_once(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await producer.append_user(OA, "once", event_id="e-1")
    await producer.append_user(OA, "once", event_id="e-1")
    await project_all(log, side.store)
    assert [m.content for m in (await inputs_of(side, OA)).messages] == ["once"]


async def test_open_tool_calls_are_the_latest_assistant_calls_not_answered_yet(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    calls = [{"id": c, "type": "function", "function": {"name": "f", "arguments": "{}"}} for c in ("c1", "c2")]
    await producer.append_user(TOOLS, "look both up")
    await producer.append_assistant(TOOLS, None, tool_calls=calls)
    await producer.append_tool_result(TOOLS, tool_call_id="c1", content="one")
    await project_all(log, side.store)
    assert await side.reads.open_tool_calls(TOOLS) == ("c2",)
    assert await side.reads.open_tool_calls(UNKNOWN) == ()
    await producer.append_user(TOOLS, "never mind")
    await project_all(log, side.store)
    assert await side.reads.open_tool_calls(TOOLS) == ()


async def test_the_list_pages_by_latest_user_activity_never_active_last(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    for i in range(7):
        key = ConversationKey("acme", "employee-42", f"c{i}")
        if i % 3 == 0:
            await producer.append_system(key, "a prompt, no user yet")
        else:
            await producer.append_user(key, f"hello {i}")
    await producer.append_user(ConversationKey("acme", "someone-else", "c9"), "not mine")
    await project_all(log, side.store)
    seen, before = [], None
    while True:
        items, before = await side.reads.list_conversations("acme", "employee-42", limit=2, before=before)
        seen.extend(i.conversation_id for i in items)
        if before is None:
            break
    assert seen == ["c5", "c4", "c2", "c1", "c0", "c3", "c6"]  # newest activity first, then idle by id
    with pytest.raises(ValueError, match="cursor"):
        await side.reads.list_conversations("acme", "employee-42", before="not a cursor")
    with pytest.raises(ValueError, match="limit"):
        await side.reads.list_conversations("acme", "employee-42", limit=0)


async def test_unknown_conversations_the_transcript_pages_and_positions(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    done = await append_oa_conversation(producer, OA)
    await project_all(log, side.store)
    assert await side.reads.context_inputs(UNKNOWN, encoding="o200k_base") is None
    assert await side.reads.transcript(UNKNOWN) is None
    assert await side.reads.summaries(UNKNOWN) is None
    assert await side.reads.transcript(OA, before=0) == ([], None)
    pages, before = [], None
    while True:
        page = await side.reads.transcript(OA, limit=8, before=before)
        assert page is not None
        entries, before = page
        pages.append([e["seq"] for e in entries])
        if before is None:
            break
    assert pages == [list(range(13, 21)), list(range(5, 13)), list(range(5))]
    partition = done[-1].partition
    assert await side.reads.projection_position(partition) == done[-1].offset + 1
    assert await side.reads.projection_position(99) == 0
    at = await side.reads.logged_at(OA, partition)
    assert (at.offsets, at.projected, at.first_offset, at.indexed) == (
        tuple(d.offset for d in done),
        done[-1].offset + 1,
        done[0].offset,
        True,
    )
    one = await side.reads.logged_at(OA, partition, event_id=done[4].event_id)
    assert one.offsets == (done[4].offset,)


async def test_the_store_refuses_a_batch_whose_positions_moved(
    side: ReadSide, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    first = await producer.append_user(OA, "hello")
    await project_all(log, side.store)
    batch = await log.read({first.partition: first.offset}, timeout_s=1)
    with pytest.raises(PositionConflictError):
        await side.store.apply(batch.records, {first.partition: first.offset})
    assert [m.content for m in (await inputs_of(side, OA)).messages] == ["hello"]  # nothing applied twice


async def _mixed_history(producer: ConversationProducer, log: EmbeddedEventLog, seed: int) -> list[ConversationKey]:
    """Messages, tool groups, an interrupted stream, redactions, summaries (also stale ones that
    leave a redacted message unlisted), clears, erases (also a void conditional one), duplicates."""
    rng = random.Random(seed)
    keys = [ConversationKey("acme", f"user-{i % 2}", f"mixed-{i}") for i in range(5)]
    ids: dict[ConversationKey, list[str]] = {k: [] for k in keys}
    last: dict[ConversationKey, int] = {}
    for step in range(160):
        key = rng.choice(keys)
        roll = rng.random()
        if roll < 0.35:
            done = await producer.append_user(key, rng.choice(["hi", "and then?", "数字 42", "x" * rng.randint(1, 90)]))
        elif roll < 0.55:
            thinking = "thinking" * rng.randint(0, 3)
            done = await producer.append_assistant(
                key, f"answer {step}", reasoning_content=thinking, finish_reason=rng.choice(["stop", "interrupted"])
            )
        elif roll < 0.62:
            call = f"call-{step}"
            await producer.append_assistant(
                key,
                None,
                tool_calls=[{"id": call, "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}],
                finish_reason="tool_calls",
            )
            done = await producer.append_tool_result(key, tool_call_id=call, content='{"found": true}')
        elif roll < 0.64:  # answers no open call: stored, flagged, never served
            done = await producer.append_tool_result(key, tool_call_id="no-such-call", content="?")
        elif roll < 0.7 and ids[key]:
            await producer.redact(key, rng.choice(ids[key]), reason="pii")
            continue
        elif roll < 0.8 and ids[key]:
            excluded = tuple(rng.sample(ids[key], k=min(1, len(ids[key])))) if rng.random() < 0.5 else None
            await producer.append(
                key,
                SummaryRecorded(
                    summary_id=f"s{step}",
                    text=f"summary {step}",
                    covers_through_message_id=rng.choice(ids[key]),
                    model="m",
                    prompt_version="v",
                    excluded_message_ids=excluded,
                ),
            )
            continue
        elif roll < 0.85:
            await producer.clear(key)
            continue
        elif roll < 0.88:
            condition = rng.choice([None, last.get(key, 0), 0])  # applies, or is void: the conversation moved on
            last[key] = (await producer.erase(key, reason="gdpr", only_if_last_offset=condition)).offset
            continue
        elif roll < 0.94:  # native (schema v4): thinking, opaque blocks, parallel calls, an error result
            calls = (f"toolu-{step}-a", f"toolu-{step}-b")
            await producer.append(key, thinking_answer(f"native-{step}", call_ids=calls))
            await producer.append(key, tool_result(calls[0], "sunny", message_id=f"result-{step}-a"))
            done = await producer.append(
                key, tool_result(calls[1], "no such city", message_id=f"result-{step}-b", is_error=True)
            )
        else:
            done = await producer.append_user(key, "twice", event_id=f"dup-{step % 3}-{key.conversation_id}")
        ids[key].append(done.message_id or "")
        last[key] = done.offset
    await log.append(key=keys[4].encode(), value=b"\xc3\x01garbage")  # parks the last one
    await producer.append_user(keys[4], "held")
    return keys


@pytest.mark.postgres
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_both_adapters_answer_every_read_alike(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer, seed: int
) -> None:
    keys = await _mixed_history(producer, log, seed)
    sides = [in_memory(), in_postgres(projection)]
    for s in sides:
        await project_all(log, s.store, batch_size=7)  # many batches: rules across batch boundaries

    async def answers(reads: ReadModels) -> list[Any]:
        out: list[Any] = []
        for key in [*keys, UNKNOWN]:
            for encoding in ENCODINGS:
                out.append(await reads.context_inputs(key, encoding=encoding))
                out.extend([await reads.context_inputs(key, encoding=encoding, newest=n) for n in (1, 4, 50)])
            out.append(await reads.transcript(key, limit=5))
            out.append(await reads.transcript(key, limit=1000))
            out.append(await reads.summaries(key))
            out.extend([await reads.logged_at(key, partition) for partition in range(log.partition_count)])
        for user in ("user-0", "user-1"):
            out.append(await reads.list_conversations("acme", user, limit=2))
            out.append(await reads.list_conversations("acme", user))
        out.extend([await reads.projection_position(p) for p in range(log.partition_count)])
        return out

    memory, postgres = [await answers(s.reads) for s in sides]
    assert len(memory) == len(postgres)
    for i, (m, p) in enumerate(zip(memory, postgres, strict=True)):
        assert m == p, f"answer {i} differs"
