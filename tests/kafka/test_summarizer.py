"""The summarizer on real Kafka and Postgres, calling a loopback OpenAI-compatible server through
the real ``openai`` client: coverage without gap or overlap, exactly one summary per watermark
across a SIGKILL, no information gap while the endpoint is down, rebuilds without model calls."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from events.codec import default_codec
from events.event_types import SummaryRecorded
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from events.producer import ConversationProducer
from events.reading import conversation_events
from pgstore.reads import PostgresReadModels
from pgstore.summaries import PostgresSummaryStore
from pgstore.versions import compare
from projectors.log_source import LogSource
from projectors.runner import Projector
from projectors.tokens import cached_counter, model_spec
from query_api.context import SUMMARY_HEADER, assemble
from query_api.context_types import Context, ContextRequest
from summarizer.openai_model import OpenAISummaryModel
from summarizer.runner import Summarizer, SummarizerOptions
from tests.fake_llm import MARKER, FakeLLM
from tests.projection_support import SEED_000_WINDOW, Projection, project_all, projection_database
from tests.support import free_port, unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 3
KEY = ConversationKey("acme", "u1", "long-chat")
SYSTEM = "You are a helpful assistant."
ARGS = '{"city": "Paris", "unit": "C"}'
RESULT = '{"temp": 21, "sky": "clear"}'


@dataclass
class Stack:
    topic: str
    producer: ConversationProducer
    log: KafkaEventLog
    projection: Projection
    projector: Projector
    summarizer: Summarizer | None

    async def wait(self, what: Callable[[], Any], timeout_s: float = 30.0) -> Any:
        for _ in range(int(timeout_s / 0.05)):
            result = what()
            if asyncio.iscoroutine(result):
                result = await result
            if result:
                return result
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out after {timeout_s}s")

    async def projected(self, partition: int, offset: int) -> None:
        await self.wait(lambda: self.projector.positions.get(partition, 0) > offset)

    async def summarized(self, partition: int, offset: int) -> None:
        assert self.summarizer is not None
        await self.wait(lambda: self.summarizer.stats.positions.get(partition, 0) > offset)  # type: ignore[union-attr]

    async def context(self) -> Context:
        reads = PostgresReadModels(self.projection.pool, schema=self.projection.version.schema)
        inputs = await reads.context_inputs(KEY, encoding="o200k_base")
        assert inputs is not None
        return assemble(
            system=inputs.system,
            summary=inputs.summary,
            messages=inputs.messages,
            request=ContextRequest("gpt-4o", 100_000),
            spec=model_spec("gpt-4o"),
            count=cached_counter("o200k_base"),
        )

    async def summaries(self) -> list[tuple[str, str | None]]:
        rows = await self.projection.rows("SELECT covers_through_message_id, text FROM {s}.summaries ORDER BY seq")
        return [(r[0], r[1]) for r in rows]


def make_summarizer(
    topic: str, reader: KafkaEventLog, writer: KafkaEventLog, projection: Projection, fake: FakeLLM, **options: Any
) -> Summarizer:
    model = OpenAISummaryModel(
        base_url=fake.base_url, api_key="test", model="fake-summarizer", timeout_s=1.0, max_retries=0
    )
    return Summarizer(
        LogSource(reader),
        PostgresSummaryStore(projection.pool, consumer=f"summarizer.{topic}"),
        ConversationProducer(writer, producer="summarizer"),
        model,
        codec=default_codec(),
        log_ends=reader.end_offsets,
        options=SummarizerOptions(fetch_timeout_s=0.1, retry_base_s=0.1, retry_max_delay_s=0.5, **options),
    )


@asynccontextmanager
async def stack(kafka_bootstrap: str, pg_admin_url: str, fake: FakeLLM | None) -> AsyncIterator[Stack]:
    """A topic, a projection database, a projector and (with ``fake``) a summarizer, each reading
    through a log connection of its own."""
    topic = unique_topic()
    logs = [
        await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=PARTITIONS) for _ in range(3)
    ]
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    try:
        async with projection_database(pg_admin_url) as projection:
            # The turn numbers below are seed 000's window's folds (8 -> 6: turns 1-3 leave at turn 9).
            projector = Projector(LogSource(logs[1]), projection.store(policy=SEED_000_WINDOW), fetch_timeout_s=0.1)
            tasks.append(asyncio.create_task(projector.run(stop)))
            summarizer = None
            if fake is not None:
                summarizer = make_summarizer(topic, logs[2], logs[0], projection, fake)
                tasks.append(asyncio.create_task(summarizer.run(stop)))
            try:
                yield Stack(
                    topic, ConversationProducer(logs[0], producer="app"), logs[0], projection, projector, summarizer
                )
            finally:
                stop.set()
                await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        for log in logs:
            await log.close()


async def chat_turn(producer: ConversationProducer, t: int) -> tuple[int, int]:
    """Turn ``t``: a question, on every third turn a tool call and its result, and an answer with
    reasoning. Returns the answer's coordinates."""
    await producer.append_user(KEY, f"Q{t}: what about item {t}?", message_id=f"u{t}")
    if t % 3 == 2:
        calls = [{"id": f"call{t}", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}]
        await producer.append_assistant(
            KEY,
            None,
            tool_calls=calls,
            finish_reason="tool_calls",
            reasoning_content=f"private reasoning R{t}",
            message_id=f"c{t}",
        )
        await producer.append_tool_result(KEY, tool_call_id=f"call{t}", content=RESULT, message_id=f"r{t}")
    done = await producer.append_assistant(
        KEY,
        f"Answer to item {t}.",
        finish_reason="stop",
        reasoning_content=f"private reasoning R{t}",
        message_id=f"a{t}",
    )
    return done.partition, done.offset


def markers(text: str) -> set[int]:
    return {int(n) for n in MARKER.findall(text)}


async def test_forty_turns_are_summarized_without_gap_or_overlap(kafka_bootstrap: str, pg_admin_url: str) -> None:
    with FakeLLM().running() as fake:
        async with stack(kafka_bootstrap, pg_admin_url, fake) as s:
            await s.producer.append_system(KEY, SYSTEM)
            for t in range(1, 41):
                await s.summarized(*await chat_turn(s.producer, t))

            # Window 8 turns, then keep 6: turn 9 evicts 1-3, turn 12 evicts 4-6, ... turn 39 evicts 31-33.
            summaries = await s.summaries()
            assert [w for w, _ in summaries] == [f"a{t}" for t in range(3, 34, 3)]
            requests = fake.answered()
            assert len(requests) == 11
            for i, body in enumerate(requests):
                prompt = body["messages"][1]["content"]
                previous, new = prompt.split("Turns to fold in, oldest first:\n")
                assert markers(new) == {3 * i + 1, 3 * i + 2, 3 * i + 3}  # exactly the turns that left the window
                assert markers(previous) == set(range(1, 3 * i + 1))  # folded into the summary so far
                assert body["temperature"] == 0
                raw = json.dumps(body, ensure_ascii=False)
                assert "private reasoning" not in raw
                assert ARGS not in prompt
                assert RESULT not in prompt
                assert "{" not in new
                assert "Assistant called get_weather(city: Paris, unit: C)" in new  # turn 3i+2 called a tool
                assert "Result of get_weather: temp: 21, sky: clear" in new

            ctx = await s.context()
            roles = [m["role"] for m in ctx.messages]
            assert ctx.messages[0] == {"role": "system", "content": SYSTEM}
            assert ctx.messages[1]["role"] == "system"
            assert ctx.messages[1]["content"].startswith(SUMMARY_HEADER)
            assert ctx.messages[2]["content"].startswith("Q34:")  # the window follows the summary
            assert "system" not in roles[2:]
            assert ctx.compressed
            assert markers(" ".join(str(m.get("content")) for m in ctx.messages)) == set(range(1, 41))

            # A rebuild from offset 0 reads the recorded summaries: no model call, equal tables.
            calls_before = len(fake.answered())
            rebuilt = await s.projection.new_version()
            await project_all(s.log, s.projection.store(schema=rebuilt.schema, policy=SEED_000_WINDOW))
            assert len(fake.answered()) == calls_before
            assert await compare_tables(s.projection, rebuilt.schema) == []


async def test_a_summarizer_started_at_latest_leaves_the_history_alone_until_its_next_turn(
    kafka_bootstrap: str, pg_admin_url: str
) -> None:
    """CONVLOG_SUMMARIZER_START=latest on a log with history: no model call for the past; a
    conversation is summarized (all of what left its window) at its next completed turn."""
    with FakeLLM().running() as fake:
        async with stack(kafka_bootstrap, pg_admin_url, None) as s:
            for t in range(1, 13):  # turns 1-6 have left the window
                await s.projected(*await chat_turn(s.producer, t))
            reader = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=s.topic, partitions=PARTITIONS)
            summarizer = make_summarizer(s.topic, reader, s.log, s.projection, fake, start="latest")
            stop = asyncio.Event()
            task = asyncio.create_task(summarizer.run(stop))
            try:
                ends = await s.log.end_offsets()
                await s.wait(lambda: summarizer.stats.positions and summarizer.stats.positions == ends)
                await asyncio.sleep(0.5)
                assert fake.answered() == []
                assert await s.summaries() == []
                partition, offset = await chat_turn(s.producer, 13)
                await s.wait(lambda: summarizer.stats.positions.get(partition, 0) > offset)
                assert [w for w, _ in await s.summaries()] == ["a6"]
                [request] = fake.answered()
                assert markers(request["messages"][1]["content"]) == set(range(1, 7))
                stored = await s.projection.rows(
                    "SELECT partition, next_offset FROM convlog.summarizer_positions WHERE consumer = %s ORDER BY 1",
                    f"summarizer.{s.topic}",
                )
                assert len(stored) == PARTITIONS  # decided once, stored at the first assignment
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)
                await reader.close()


async def compare_tables(projection: Projection, schema: str) -> list[tuple[str, str]]:
    async with projection.pool.connection() as conn:
        return await compare(conn, projection.version.schema, schema)


async def test_endpoint_down_leaves_no_gap_and_summaries_arrive_after_recovery(
    kafka_bootstrap: str, pg_admin_url: str
) -> None:
    with FakeLLM().running() as fake:
        fake.mode, fake.stall_s = "stall", 3.0  # slower than the client's 1 s timeout
        async with stack(kafka_bootstrap, pg_admin_url, fake) as s:
            assert s.summarizer is not None
            await s.producer.append_system(KEY, SYSTEM)
            for t in range(1, 10):
                last = await chat_turn(s.producer, t)
            await s.projected(*last)
            await s.wait(lambda: s.summarizer.stats.failures >= 1)  # type: ignore[union-attr]
            fake.mode = "fail"
            for t in range(10, 13):
                last = await chat_turn(s.producer, t)
            await s.projected(*last)
            await s.wait(lambda: s.summarizer.stats.failures >= 3)  # type: ignore[union-attr]

            ctx = await s.context()  # turns 1-6 left the window, no summary covers them: served raw
            assert not ctx.compressed
            assert await s.summaries() == []
            assert markers(" ".join(str(m.get("content")) for m in ctx.messages)) == set(range(1, 13))

            fake.mode = "ok"
            await s.wait(s.summaries)
            assert [w for w, _ in await s.summaries()] == ["a6"]  # one summary catches up on turns 1-6
            ctx = await s.context()
            assert ctx.compressed
            assert markers(" ".join(str(m.get("content")) for m in ctx.messages)) == set(range(1, 13))


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def _start_summarizer(env: dict[str, str], log_file: Path) -> subprocess.Popen[bytes]:
    with log_file.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "convlog.cli.main", "summarize"], cwd=REPO, env=env, stdout=out, stderr=out
        )


async def test_sigkill_right_after_the_answer_records_exactly_one_summary(
    kafka_bootstrap: str, pg_admin_url: str, tmp_path: Path
) -> None:
    with FakeLLM().running() as fake:
        async with stack(kafka_bootstrap, pg_admin_url, None) as s:
            env = {
                **os.environ,
                "CONVLOG_KAFKA_BOOTSTRAP": kafka_bootstrap,
                "CONVLOG_TOPIC": s.topic,
                "CONVLOG_PARTITIONS": str(PARTITIONS),
                "CONVLOG_DATABASE_URL": s.projection.url,
                "CONVLOG_LLM_BASE_URL": fake.base_url,
                "CONVLOG_LLM_MAX_RETRIES": "0",
                "CONVLOG_SUMMARIZER_INSTANCE_ID": "summarizer-1",
                # The stack's projector and producer here are plain (no key ring): so is the summarizer.
                "CONVLOG_SEALING": "false",
                "CONVLOG_KAFKA_SESSION_TIMEOUT_MS": "6000",
            }
            process = _start_summarizer(env, tmp_path / "summarizer.log")
            killed: list[int] = []

            def kill_once(_: dict[str, Any]) -> None:
                if not killed:
                    os.kill(process.pid, signal.SIGKILL)  # the answer is out; the append has not happened
                    killed.append(process.pid)

            fake.on_answer = kill_once
            try:
                await s.producer.append_system(KEY, SYSTEM)
                for t in range(1, 10):
                    last = await chat_turn(s.producer, t)
                await s.projected(*last)
                await s.wait(lambda: killed, timeout_s=60)
                assert await asyncio.to_thread(process.wait, 10) == -signal.SIGKILL
                fake.on_answer = None
                port = free_port()
                process = _start_summarizer({**env, "CONVLOG_METRICS_PORT": str(port)}, tmp_path / "summarizer.log")
                await s.wait(s.summaries, timeout_s=60)
                scraped = await asyncio.to_thread(_scrape, port)
                assert "convlog_summaries_recorded_total 1.0" in scraped
                assert 'convlog_summary_llm_tokens_total{direction="input"} 100.0' in scraped
            finally:
                process.send_signal(signal.SIGTERM)
                await asyncio.to_thread(process.wait, 30)
            recorded = [e async for _, e in conversation_events(s.log, KEY) if isinstance(e.body, SummaryRecorded)]
            print(f"model requests: {len(fake.answered())}; SummaryRecorded events in the log: {len(recorded)}")
            assert len(recorded) == 1
            body = recorded[0].body
            assert isinstance(body, SummaryRecorded)
            assert body.covers_through_message_id == "a3"
            assert len(fake.answered()) >= 1
            assert [w for w, _ in await s.summaries()] == ["a3"]


def another_summarizer(s: Stack, fake: FakeLLM, log: KafkaEventLog) -> Summarizer:
    model = OpenAISummaryModel(base_url=fake.base_url, api_key="test", model="fake-summarizer", max_retries=0)
    return Summarizer(
        LogSource(log),
        PostgresSummaryStore(s.projection.pool, consumer=f"summarizer.{s.topic}"),
        ConversationProducer(s.log, producer="summarizer"),
        model,
        codec=default_codec(),
        log_ends=log.end_offsets,
        options=SummarizerOptions(fetch_timeout_s=0.1),
    )


async def summary_events(s: Stack) -> list[str]:
    return [e.event_id async for _, e in conversation_events(s.log, KEY) if isinstance(e.body, SummaryRecorded)]


async def test_redelivery_and_a_second_instance_record_no_second_summary(
    kafka_bootstrap: str, pg_admin_url: str
) -> None:
    with FakeLLM().running() as fake:
        async with stack(kafka_bootstrap, pg_admin_url, None) as s:
            reader = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=s.topic, partitions=PARTITIONS)
            other = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=s.topic, partitions=PARTITIONS)
            try:
                await s.producer.append_system(KEY, SYSTEM)
                for t in range(1, 10):
                    last = await chat_turn(s.producer, t)
                await s.projected(*last)
                first = another_summarizer(s, fake, reader)
                stop = asyncio.Event()
                task = asyncio.create_task(first.run(stop))
                await s.wait(s.summaries)
                await s.wait(lambda: first.stats.positions.get(last[0], 0) > last[1])
                stop.set()
                await task
                assert len(fake.answered()) == 1

                # Redelivery: the positions are lost (as if it died before storing them).
                await s.projection.execute("UPDATE convlog.summarizer_positions SET next_offset = 0")
                again = another_summarizer(s, fake, reader)
                stop = asyncio.Event()
                task = asyncio.create_task(again.run(stop))
                await s.wait(lambda: again.stats.positions.get(last[0], 0) > last[1])
                stop.set()
                await task
                assert len(fake.answered()) == 1  # the read models showed the watermark covered: no call
                assert len(await summary_events(s)) == 1

                # Two instances that both believe they own the partitions (a rebalance in flight).
                a, b = another_summarizer(s, fake, reader), another_summarizer(s, fake, other)
                stop = asyncio.Event()
                tasks = [asyncio.create_task(x.run(stop)) for x in (a, b)]
                for t in range(10, 16):
                    last = await chat_turn(s.producer, t)
                await s.wait(lambda: all(x.stats.positions.get(last[0], 0) > last[1] for x in (a, b)))
                stop.set()
                await asyncio.gather(*tasks)
                ids = await summary_events(s)
                print(f"SummaryRecorded events in the log: {len(ids)}, distinct ids: {len(set(ids))}")
                watermarks = [w for w, _ in await s.summaries()]
                # A batch holding turns 12 and 15 both folds 4-9 at once: a6 may be skipped, never a9.
                assert watermarks in (["a3", "a6", "a9"], ["a3", "a9"])
                assert len(set(ids)) == len(watermarks)  # one per watermark, whatever the log holds twice
            finally:
                await reader.close()
                await other.close()


async def test_a_redaction_withdraws_the_summary_and_the_redo_never_sees_the_content(
    kafka_bootstrap: str, pg_admin_url: str
) -> None:
    with FakeLLM().running() as fake:
        async with stack(kafka_bootstrap, pg_admin_url, fake) as s:
            await s.producer.append_system(KEY, SYSTEM)
            for t in range(1, 10):
                await s.summarized(*await chat_turn(s.producer, t))
            [(watermark, text)] = await s.summaries()
            assert (watermark, markers(text or "")) == ("a3", {1, 2, 3})

            redaction = await s.producer.redact(KEY, "u2", reason="the user asked")
            await s.summarized(redaction.partition, redaction.offset)
            (_, withdrawn), (redo_watermark, redo_text) = await s.summaries()
            assert withdrawn is None  # the summary that repeated Q2 is gone from the read models
            assert (redo_watermark, markers(redo_text or "")) == ("a3", {1, 3})  # same turns, without Q2
            assert len(fake.answered()) == 2
            assert "Q2" not in json.dumps(fake.answered()[-1])
            recorded = [e.body async for _, e in conversation_events(s.log, KEY) if isinstance(e.body, SummaryRecorded)]
            assert [b.excluded_message_ids for b in recorded] == [(), ("u2",)]  # the redo says what it left out
            ctx = await s.context()
            assert ctx.compressed
            assert markers(" ".join(str(m.get("content")) for m in ctx.messages)) == set(range(1, 10)) - {2}
