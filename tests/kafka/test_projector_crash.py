"""Crash safety: the projector process is killed with SIGKILL again and again while a producer
writes; at the end every table equals a clean rebuild, nothing missing, nothing twice."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from events.producer import ConversationProducer
from pgstore.versions import compare
from tests.projection_support import Projection, project_all
from tests.support import unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CONVERSATIONS = 500
EVENTS = 20_000
KILLS = 10


def _start_projector(env: dict[str, str], log_file: Path) -> subprocess.Popen[bytes]:
    with log_file.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "convlog.cli.main", "project"], cwd=REPO, env=env, stdout=out, stderr=out
        )


async def _produce(producer: ConversationProducer, rate_per_s: float) -> int:
    """40 events per conversation: turns of user/assistant, some with tool calls, a redaction,
    a clear — sent at a steady rate from 50 concurrent writers."""
    written = 0
    started = time.monotonic()

    async def writer(w: int) -> None:
        nonlocal written
        for c in range(w, CONVERSATIONS, 50):
            key = ConversationKey("acme", f"user-{c % 37}", f"conv-{c}")
            n = 0
            while n < EVENTS // CONVERSATIONS:
                turn = n // 4
                if turn % 5 == 3:
                    calls = [
                        {
                            "id": f"call-{c}-{turn}",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": '{"q": 1}'},
                        }
                    ]
                    await producer.append_user(key, f"turn {turn}: look something up", message_id=f"u{c}-{turn}")
                    await producer.append_assistant(key, None, tool_calls=calls, finish_reason="tool_calls")
                    await producer.append_tool_result(key, tool_call_id=f"call-{c}-{turn}", content="found")
                    await producer.append_assistant(key, "here it is", finish_reason="stop")
                elif turn == 6:
                    await producer.append_user(key, "my phone is 555-1234", message_id=f"u{c}-{turn}")
                    await producer.redact(key, f"u{c}-{turn}", reason="pii")
                    await producer.clear(key)
                    await producer.append_user(key, "fresh start")
                else:
                    for i in range(2):
                        await producer.append_user(key, f"turn {turn} question {i} 你好")
                        await producer.append_assistant(key, f"answer {i}", model="gpt-4o-mini", finish_reason="stop")
                n += 4
                written += 4
                await asyncio.sleep(max(0.0, written / rate_per_s - (time.monotonic() - started)))

    await asyncio.gather(*(writer(w) for w in range(50)))
    return written


async def test_sigkill_at_random_moments_equals_a_clean_rebuild(
    projection: Projection, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = unique_topic("crash")
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=6)
    producer = ConversationProducer(log, producer="crash-test")
    env = {
        **os.environ,
        "CONVLOG_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "CONVLOG_DATABASE_URL": projection.url,
        "CONVLOG_TOPIC": topic,
        "CONVLOG_DATA_DIR": str(tmp_path),
        "CONVLOG_LOG_LEVEL": "warning",
        "CONVLOG_KAFKA_SESSION_TIMEOUT_MS": "6000",
        "CONVLOG_PROJECTOR_INSTANCE_ID": "crash-test-projector",  # a restart takes its partitions back at once
    }
    log_file = tmp_path / "projector.log"
    rng = random.Random(7)
    producing = asyncio.create_task(_produce(producer, rate_per_s=400))  # ~50 s of writing
    proc = _start_projector(env, log_file)
    kills = 0
    progress: list[int] = []  # events applied when each kill hit

    async def applied_so_far() -> int:
        return sum(o for _, o in await projection.rows("SELECT partition, next_offset FROM {s}.positions"))

    try:
        while not producing.done():
            # Kill a projector at work: once it applied something since the last kill, at a
            # random moment within the next 1.5 s (mid-batch, mid-commit, between batches).
            before = progress[-1] if progress else 0
            deadline = time.monotonic() + 60
            while await applied_so_far() <= before and not producing.done():
                if time.monotonic() > deadline:
                    pytest.fail(f"projector made no progress after restart {kills}\n{log_file.read_text()[-3000:]}")
                assert proc.poll() is None, log_file.read_text()[-3000:]
                await asyncio.sleep(0.05)
            if producing.done():
                break
            await asyncio.sleep(rng.uniform(0.0, 1.5))
            progress.append(await applied_so_far())
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            proc = _start_projector(env, log_file)
        written = await producing
        ends = await log.end_offsets()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            positions = dict(await projection.rows("SELECT partition, next_offset FROM {s}.positions"))
            if all(positions.get(p, 0) >= o for p, o in ends.items()):
                break
            assert proc.poll() is None, log_file.read_text()[-3000:]
            await asyncio.sleep(0.5)
        else:
            pytest.fail(f"projector did not catch up: {positions} < {ends}\n{log_file.read_text()[-3000:]}")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert kills >= KILLS
    assert all(a < b for a, b in itertools.pairwise(progress)), progress  # every kill hit a projector at work

    rebuilt = await projection.new_version()
    reader = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=6)
    try:
        await project_all(reader, projection.store(schema=rebuilt.schema, fail_fast=True), batch_size=2000)
    finally:
        await reader.close()
        await log.close()
    async with projection.pool.connection() as conn:
        assert await compare(conn, projection.version.schema, rebuilt.schema) == []
    [(applied,)] = await projection.rows("SELECT count(*) FROM {s}.event_ids")
    assert applied == written == sum(ends.values())  # every acknowledged event exactly once
    assert await projection.rows("SELECT count(*) FROM {s}.dead_letters") == [(0,)]
    print(f"\n{kills} kills at applied={progress}, {applied} events, {CONVERSATIONS} conversations")
