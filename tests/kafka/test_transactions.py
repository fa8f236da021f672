"""A transactional producer on real Kafka (what Spring Kafka and Kafka Streams apps do with
exactly-once): commit and abort markers take offsets and are never delivered, aborted records are
never shown. Only committed events are projected and read, every partition's lag reaches 0 —
also when its last offset is a marker — and every read and operator command finishes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from convlog.jobs.retention import active_since
from events.codec import default_codec
from events.event_types import Event
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey, partition_for_key
from events.log import LogRecord
from events.producer import ConversationProducer
from events.reading import conversation_events
from pgstore.reads import PostgresReadModels
from pgstore.summaries import PostgresSummaryStore
from projectors.log_source import LogSource
from projectors.runner import Projector
from projectors.window import WindowPolicy
from query_api.as_of import BeforeMessage, context_inputs_as_of
from query_api.http import ApiDeps, HttpSettings, create_app
from query_api.live import QueryService
from query_api.metrics import Metrics
from summarizer.offline_model import OfflineSummaryModel
from summarizer.runner import Summarizer, SummarizerOptions
from tests.kafka.ops_support import PARTITIONS, Ops
from tests.kafka.transactional import keys_on_distinct_partitions, transactional_app
from tests.projection_support import Projection, projection_database
from tests.support import unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

A, B, C = keys_on_distinct_partitions(3, PARTITIONS, prefix="tx")
COMMITTED_A = [m for t in range(1, 5) for m in (f"u{t}", f"a{t}")] + ["u5"]
HEADERS = {"Authorization": "Bearer token-a"}


async def write_history(bootstrap: str, topic: str) -> None:
    """A's partition ends with a commit marker, B's with an abort marker, C's holds nothing
    committed at all; between A's committed turns lie aborted ones."""
    async with transactional_app(bootstrap, topic, PARTITIONS) as (app, kafka):
        for t in range(1, 5):
            async with kafka.transaction():
                await app.append_user(A, f"question {t}", message_id=f"u{t}")
                await app.append_assistant(A, f"answer {t}", finish_reason="stop", message_id=f"a{t}")
            await kafka.begin_transaction()
            await app.append_user(A, f"ghost question {t}", message_id=f"g{t}")
            await kafka.abort_transaction()
        async with kafka.transaction():
            await app.append_user(A, "question 5", message_id="u5")
            await app.append_user(B, "hello from B", message_id="b1")
        await kafka.begin_transaction()
        await app.append_user(B, "ghost on B", message_id="gb")
        await app.append_user(C, "ghost on C", message_id="gc")
        await kafka.abort_transaction()


async def project_to_end(log: KafkaEventLog, projection: Projection, **store: Any) -> dict[int, int]:
    """Project up to the log's end (a rebuild's ``until``): it must get there, markers and all."""
    ends = await log.end_offsets()
    projector = Projector(LogSource(log), projection.store(**store), fetch_timeout_s=0.1)
    await asyncio.wait_for(projector.run(asyncio.Event(), until=ends), 30)
    return ends


async def events_of(log: KafkaEventLog, key: ConversationKey) -> list[tuple[LogRecord, Event]]:
    async def read() -> list[tuple[LogRecord, Event]]:
        return [pair async for pair in conversation_events(log, key)]

    return await asyncio.wait_for(read(), 15)


def message_ids(pairs: list[tuple[LogRecord, Event]]) -> list[str]:
    return [str(getattr(e.body, "message_id", "")) for _, e in pairs]


@pytest.fixture
async def history(ops: Ops, kafka_bootstrap: str) -> dict[int, int]:
    """The history written transactionally and projected; the log's ends."""
    await write_history(kafka_bootstrap, ops.topic)
    return await project_to_end(ops.log, ops.projection)


async def test_only_committed_events_are_projected_and_the_lag_reaches_zero(ops: Ops, history: dict[int, int]) -> None:
    rows = await ops.projection.rows(
        "SELECT conversation_key, message_id FROM {s}.transcript ORDER BY conversation_key, seq"
    )
    assert [m for k, m in rows if k == str(A)] == COMMITTED_A
    assert [m for k, m in rows if k == str(B)] == ["b1"]
    assert {k for k, _ in rows} == {str(A), str(B)}  # C's only events were aborted
    stored = dict(await ops.projection.rows("SELECT partition, next_offset FROM {s}.positions"))
    c_partition = partition_for_key(C.encode(), PARTITIONS)
    assert history[c_partition] > 0  # C's partition holds the aborted records and a marker...
    assert {p: stored.get(p, 0) for p in history} == history  # ...and every partition is read to its end


async def test_reads_of_the_log_finish_and_show_only_committed_events(ops: Ops, history: dict[int, int]) -> None:
    pairs = await events_of(ops.log, A)
    assert message_ids(pairs) == COMMITTED_A
    assert message_ids(await events_of(ops.log, B)) == ["b1"]
    assert await events_of(ops.log, C) == []

    async def as_of(point: int | BeforeMessage) -> list[str]:
        reading = context_inputs_as_of(
            ops.log, A, point, encoding="o200k_base", policy=WindowPolicy(), max_event_bytes=1 << 20
        )
        inputs = await asyncio.wait_for(reading, 15)
        assert inputs is not None
        return [m.message_id for m in inputs.messages]

    assert await as_of(pairs[-1][0].offset) == COMMITTED_A
    assert await as_of(BeforeMessage("a4")) == COMMITTED_A[:7]
    everyone = {str(A), str(B), str(C)}
    since = dict.fromkeys(range(PARTITIONS), 0)
    assert await asyncio.wait_for(active_since(ops.log, since, everyone, timeout_s=10), 15) == {str(A), str(B)}

    deps = ApiDeps(
        queries=QueryService(log=ops.log, reads=lambda: _reads(ops.projection), metrics=Metrics()),
        producer=ConversationProducer(ops.log),
        http=HttpSettings(tokens={"token-a": "acme"}),
        readiness=_ready,
    )
    path = f"/v1/users/{A.user_id}/conversations/{A.conversation_id}"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(deps)), base_url="http://t") as client:
        events = await asyncio.wait_for(client.get(path + "/events", headers=HEADERS), 15)
        assert events.status_code == 200, events.text
        assert "ghost" not in events.text
        assert len(events.json()["events"]) == len(COMMITTED_A)
        for query in ("as_of=" + str(pairs[-1][0].offset), "before_message=a4"):
            context = await asyncio.wait_for(
                client.get(path + f"/context?model=gpt-4o&budget_tokens=4000&{query}", headers=HEADERS), 15
            )
            assert context.status_code == 200, context.text
            assert "ghost" not in context.text


async def test_operator_commands_finish_with_lag_zero(ops: Ops, history: dict[int, int]) -> None:
    events = ops.run("events", str(A), timeout=60)
    assert events.returncode == 0, events.stderr
    assert "question 5" in events.stdout
    assert "ghost" not in events.stdout

    positions = ops.run("positions", timeout=60)
    assert positions.returncode == 0, positions.stderr
    live = f"read_models v{ops.projection.version.version} (live)"
    assert f"{live}  total lag 0" in positions.stdout, positions.stdout

    retention = ops.run("retention", "--idle-days", "1", "--dry-run", "--wait", "10", timeout=60)
    assert retention.returncode == 0, retention.stdout + retention.stderr

    verify = ops.run("verify", "--all", timeout=60)
    assert verify.returncode == 0, verify.stdout + verify.stderr

    rebuild = ops.run("rebuild", "read_models", "--verify", "--switch", timeout=90)
    assert rebuild.returncode == 0, rebuild.stdout + rebuild.stderr
    assert "is live" in rebuild.stdout


async def test_a_read_at_a_trailing_marker_returns_at_once_with_the_position_past_it(kafka_bootstrap: str) -> None:
    topic = unique_topic("tx")
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=PARTITIONS)
    try:
        async with transactional_app(kafka_bootstrap, topic, PARTITIONS) as (app, kafka), kafka.transaction():
            last = await app.append_user(A, "the only question", message_id="u1")
        end = (await log.end_offsets())[last.partition]
        assert end == last.offset + 2  # the record, then the commit marker
        started = time.monotonic()
        batch = await log.read({last.partition: last.offset + 1}, timeout_s=10)
        assert (list(batch.records), dict(batch.positions)) == ([], {last.partition: end})
        assert time.monotonic() - started < 5  # it does not wait out the timeout
    finally:
        await log.close()


async def test_summaries_are_made_and_the_summarizer_reads_to_the_end(kafka_bootstrap: str, pg_admin_url: str) -> None:
    topic = unique_topic("tx")
    logs = [
        await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=PARTITIONS) for _ in range(3)
    ]
    partition = partition_for_key(A.encode(), PARTITIONS)
    stop = asyncio.Event()
    try:
        async with (
            projection_database(pg_admin_url) as projection,
            transactional_app(kafka_bootstrap, topic, PARTITIONS) as (app, kafka),
        ):
            store = projection.store(policy=WindowPolicy(max_turns=2, keep_turns=1))
            projector = Projector(LogSource(logs[0]), store, fetch_timeout_s=0.1)
            summarizer = Summarizer(
                LogSource(logs[1]),
                PostgresSummaryStore(projection.pool, consumer="summarizer.tx"),
                ConversationProducer(logs[2], producer="summarizer"),
                OfflineSummaryModel(),
                codec=default_codec(),
                log_ends=logs[1].end_offsets,
                options=SummarizerOptions(fetch_timeout_s=0.1),
            )
            tasks = [asyncio.create_task(projector.run(stop)), asyncio.create_task(summarizer.run(stop))]
            for t in range(1, 5):
                async with kafka.transaction():
                    await app.append_user(A, f"question {t}", message_id=f"u{t}")
                    await app.append_assistant(A, f"answer {t}", finish_reason="stop", message_id=f"a{t}")
                await kafka.begin_transaction()
                await app.append_user(A, f"ghost question {t}", message_id=f"g{t}")
                await kafka.abort_transaction()

            async def summaries() -> list[tuple[Any, ...]]:
                return await projection.rows("SELECT covers_through_message_id, text FROM {s}.summaries ORDER BY seq")

            async def settled() -> bool:
                done = await summaries()
                return "a2" in {covers for covers, _ in done}  # window 2 turns, then keep 1: turns 1-2 left it

            await _until(settled, 30)
            assert all("ghost" not in (text or "") for _, text in await summaries())
            async with kafka.transaction():  # the partition ends with a commit marker once more
                await app.append_user(A, "question 5", message_id="u5")

            async def at_end() -> bool:  # the summarizer may still be appending a summary: the end moves
                end = (await logs[0].end_offsets())[partition]
                return projector.positions.get(partition) == summarizer.stats.positions.get(partition) == end

            await _until(at_end, 30)
            end = (await logs[0].end_offsets())[partition]
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
            stored = await projection.rows(
                "SELECT next_offset FROM convlog.summarizer_positions WHERE partition = %s", partition
            )
            assert stored == [(end,)]  # `convlog positions`: the summarizer's lag is 0 too
    finally:
        stop.set()
        for log in logs:
            await log.close()


async def _until(condition: Any, timeout_s: float) -> None:
    async def wait() -> None:
        while True:
            result = condition()
            if asyncio.iscoroutine(result):
                result = await result
            if result:
                return
            await asyncio.sleep(0.05)

    await asyncio.wait_for(wait(), timeout_s)


async def _reads(projection: Projection) -> PostgresReadModels:
    return PostgresReadModels(projection.pool, schema=projection.version.schema)


async def _ready() -> dict[str, object]:
    return {"ready": True}
