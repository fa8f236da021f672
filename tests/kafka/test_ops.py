"""The operators' commands positions, dead-letters, replay and tail, run as a user runs them
(a ``convlog`` subprocess) against real Kafka and Postgres."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys

import httpx
import pytest

from convlog.demo.run import append_tools_conversation
from events.keys import ConversationKey, partition_for_key
from events.reading import conversation_events
from pgstore.reads import PostgresReadModels
from query_api.http import ApiDeps, HttpSettings, create_app
from query_api.live import QueryService
from query_api.metrics import Metrics
from tests.kafka.ops_support import PARTITIONS, REPO, Ops
from tests.projection_support import Projection, project_all

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

OA = ConversationKey("acme", "employee-42", "oa")
OTHER = ConversationKey("acme", "employee-7", "other")


def _table(stdout: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    """``positions`` output -> {(reader, partition): (position, end, lag)}."""
    rows = {}
    for line in stdout.splitlines()[1:]:
        parts = line.rsplit(maxsplit=4)
        if len(parts) == 5 and parts[1].isdigit():
            rows[(parts[0].strip(), int(parts[1]))] = (int(parts[2]), int(parts[3]), int(parts[4]))
    return rows


async def test_positions_show_each_partitions_position_end_and_lag(ops: Ops) -> None:
    for i in range(6):
        await ops.producer.append_user(OA, f"question {i}")
    await project_all(ops.log, ops.projection.store())
    oa_partition = partition_for_key(OA.encode(), PARTITIONS)
    for i in range(3):  # written after the projection ran: lag 3 on OA's partition
        await ops.producer.append_user(OA, f"later {i}")
    async with ops.projection.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO convlog.summarizer_positions (consumer, partition, next_offset) VALUES ('summarizer', %s, 4)",
            [oa_partition],
        )

    result = ops.run("positions")
    assert result.returncode == 0, result.stderr
    table = _table(result.stdout)
    live = f"read_models v{ops.projection.version.version} (live)"
    assert table[(live, oa_partition)] == (6, 9, 3)
    assert table[("summarizer summarizer", oa_partition)] == (4, 9, 5)
    for p in set(range(PARTITIONS)) - {oa_partition}:  # empty partitions: nothing to do
        assert table[(live, p)] == (0, 0, 0)
    assert f"{live}  total lag 3" in result.stdout


async def test_dead_letters_list_show_and_skip_with_a_recorded_reason(ops: Ops) -> None:
    await ops.producer.append_user(OA, "first")
    garbage = await ops.log.append(key=OA.encode(), value=b"\xc3\x01not avro at all")
    await ops.producer.append_user(OA, "after it")  # held behind the poison, in order
    await ops.producer.append_user(OTHER, "a neighbour")  # not held
    await project_all(ops.log, ops.projection.store())

    listed = ops.run("dead-letters", "list")
    assert listed.returncode == 0, listed.stderr
    [row] = [line for line in listed.stdout.splitlines()[1:] if line.strip()]
    letter_id, status, where, held, key, *_ = row.split()
    assert (status, where, held, key) == ("parked", f"p{garbage.partition}@{garbage.offset}", "1", str(OA))

    shown = ops.run("dead-letters", "show", letter_id)
    assert shown.returncode == 0, shown.stderr
    assert "not decodable by this build" in shown.stdout
    assert "c3 01 6e 6f 74 20 61 76 72 6f" in shown.stdout  # the raw value as hex
    assert "held behind   1 record(s)" in shown.stdout

    no_reason = ops.run("dead-letters", "skip", letter_id)
    assert no_reason.returncode == 2
    assert "--reason" in no_reason.stderr
    skipped = ops.run("dead-letters", "skip", letter_id, "--reason", "broken client, ticket 42")
    assert skipped.returncode == 0, skipped.stderr
    assert "1 event(s) applied" in skipped.stdout
    assert await ops.projection.rows("SELECT status, resolution FROM {s}.dead_letters") == [
        ("skipped", "broken client, ticket 42")
    ]
    rows = await ops.projection.rows(
        "SELECT content FROM {s}.transcript WHERE conversation_key = %s ORDER BY seq", str(OA)
    )
    assert rows == [("first",), ("after it",)]
    assert ops.run("dead-letters", "list").stdout.strip() == "no dead letters"
    again = ops.run("dead-letters", "skip", letter_id, "--reason", "twice")
    assert again.returncode == 2
    assert "not parked" in again.stderr


async def test_release_after_a_fix_applies_the_record_and_the_held_ones_in_order(ops: Ops) -> None:
    await ops.producer.append_user(OA, "first")
    await ops.producer.append_user(OA, "x" * 3000)  # too large for the projector's limit below
    await ops.producer.append_user(OA, "after it")
    await project_all(ops.log, ops.projection.store(max_event_bytes=2000))
    [(letter_id, code)] = await ops.projection.rows("SELECT id, error_code FROM {s}.dead_letters")
    assert code == "event_too_large"

    # Still misconfigured: the release fails and changes nothing.
    failed = ops.run("dead-letters", "release", str(letter_id), extra_env={"CONVLOG_MAX_EVENT_BYTES": "2000"})
    assert failed.returncode == 2
    assert "still fails" in failed.stderr
    assert await ops.projection.rows("SELECT status FROM {s}.dead_letters") == [("parked",)]
    # The fix (the limit raised): released, then the held record, in log order.
    released = ops.run("dead-letters", "release", str(letter_id))
    assert released.returncode == 0, released.stderr
    assert "2 event(s) applied" in released.stdout
    rows = await ops.projection.rows("SELECT seq, left(content #>> '{{}}', 5) FROM {s}.transcript ORDER BY seq")
    assert rows == [(0, "first"), (1, "xxxxx"), (2, "after")]
    assert await ops.projection.rows("SELECT status FROM {s}.dead_letters") == [("released",)]
    assert await ops.projection.rows("SELECT count(*) FROM {s}.parked") == [(0,)]
    unknown = ops.run("dead-letters", "show", "9999")
    assert unknown.returncode == 2
    assert "no dead letter with id 9999" in unknown.stderr


async def test_replay_prints_the_events_and_the_context_served_as_of_an_offset(ops: Ops) -> None:
    await ops.producer.append_system(OA, "You are terse.")
    turns = []
    for i in range(3):
        user = await ops.producer.append_user(OA, f"question {i}")
        answer = await ops.producer.append_assistant(OA, f"answer {i}", finish_reason="stop")
        turns.append((user, answer))
    await ops.producer.redact(OA, turns[0][0].message_id or "", reason="pii")  # later redaction still applies
    await project_all(ops.log, ops.projection.store())

    as_of = turns[1][1].offset  # right after the second answer
    result = ops.run("replay", str(OA), "--as-of", str(as_of), "--model", "gpt-4o", "--budget-tokens", "4000")
    assert result.returncode == 0, result.stderr
    events, _, context = result.stdout.partition(f"context as of offset {as_of} (model")
    assert "question 2" in events
    assert "redacted" in events
    later = [line for line in events.splitlines() if line.startswith("+ ")]
    assert len(later) == 3  # ... those after the as-of point marked
    served = json.loads(context[context.index("{") :])
    assert [(m["role"], m.get("content")) for m in served["messages"]] == [
        ("system", "You are terse."),
        ("user", "question 1"),
        ("assistant", "answer 1"),
    ]  # question 0 was redacted later, so its turn is gone; nothing after the as-of point
    assert served["position"] == {"partition": turns[1][1].partition, "offset": as_of}

    # the context that produced the third answer: as of the event right before it
    third = turns[2][1]
    before = ops.run("replay", str(OA), "--before-message", third.message_id or "", "--budget-tokens", "4000")
    assert before.returncode == 0, before.stderr
    assert f"right before message {third.message_id!r}" in before.stdout
    produced = json.loads(before.stdout[before.stdout.index("{", before.stdout.index(" (model gpt-4o")) :])
    assert [m.get("content") for m in produced["messages"]][-2:] == ["answer 1", "question 2"]
    assert produced["position"]["offset"] == turns[2][0].offset
    unknown = ops.run("replay", str(OA), "--before-message", "no-such-message")
    assert unknown.returncode == 2
    assert "no message 'no-such-message'" in unknown.stderr
    both = ops.run("replay", str(OA), "--as-of", "1", "--before-message", "x")
    assert both.returncode == 2
    assert "not allowed with" in both.stderr

    latest = ops.run("replay", str(OA))
    assert latest.returncode == 0, latest.stderr
    assert '"content": "answer 2"' in latest.stdout
    missing = ops.run("replay", "acme:nobody:nothing")
    assert missing.returncode == 2
    assert "no events" in missing.stderr


async def test_replay_prints_byte_for_byte_the_context_the_api_serves_as_of_that_offset(ops: Ops) -> None:
    await append_tools_conversation(ops.producer, OA)  # tool calls, reasoning, an interrupted answer
    await project_all(ops.log, ops.projection.store())
    pairs = [pair async for pair in conversation_events(ops.log, OA)]
    deps = ApiDeps(
        queries=QueryService(log=ops.log, reads=lambda: _reads(ops.projection), metrics=Metrics()),
        producer=ops.producer,
        http=HttpSettings(tokens={"token-a": "acme"}),
        readiness=_ready,
    )
    transport = httpx.ASGITransport(app=create_app(deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as client:
        for record, _ in (pairs[3], pairs[4], pairs[-1]):  # open tool call, half its results, the end
            query = f"model=deepseek-v4&budget_tokens=4000&reasoning=tool_turns&as_of={record.offset}"
            response = await client.get(
                f"/v1/users/{OA.user_id}/conversations/{OA.conversation_id}/context?{query}",
                headers={"Authorization": "Bearer token-a"},
            )
            assert response.status_code == 200, response.text
            result = ops.run(
                "replay",
                str(OA),
                "--as-of",
                str(record.offset),
                "--model",
                "deepseek-v4",
                "--budget-tokens",
                "4000",
                "--reasoning",
                "tool_turns",
            )
            assert result.returncode == 0, result.stderr
            printed = result.stdout[result.stdout.index("{", result.stdout.index(" (model deepseek-v4")) :]
            assert json.loads(printed) == response.json()


async def _reads(projection: Projection) -> PostgresReadModels:
    return PostgresReadModels(projection.pool, schema=projection.version.schema)


async def _ready() -> dict[str, object]:
    return {"ready": True}


async def test_tail_follows_a_conversation_live_and_stops_on_ctrl_c(ops: Ops) -> None:
    await ops.producer.append_user(OA, "before the tail started")
    proc = subprocess.Popen(
        [sys.executable, "-m", "convlog.cli.main", "tail", str(OA)],
        cwd=REPO,
        env=ops.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = await asyncio.to_thread(proc.stdout.readline)
        assert first.startswith(f"following {OA}"), first + (proc.stderr.read() if proc.stderr else "")
        await ops.producer.append_user(OA, "live question")
        await ops.producer.append_user(OTHER, "someone else's")
        await ops.producer.append_assistant(OA, "live answer", finish_reason="stop")
        lines = [await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30) for _ in range(2)]
        assert "live question" in lines[0], lines
        assert "live answer" in lines[1], lines
        await asyncio.sleep(1.5)  # nothing else of this conversation may show up
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "someone else's" not in rest
    assert "before the tail started" not in rest
