"""Read-your-writes without polling: a ``min_offset`` context ends its wait at the projector's
commit (``convlog serve`` wires the projector's commits to the API in one process), the read
models still confirm it, and the bounded wait still ends in a 503."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import cast

import httpx
import pytest

from convlog.ops.rebuilding import RebuildOptions, rebuild
from convlog.runtime.serve import running_service
from convlog.settings import Settings
from events.codec import default_codec
from events.embedded_log import EmbeddedEventLog
from events.keys import ConversationKey, partition_for_key
from events.producer import ConversationProducer
from pgstore.positions_listener import PositionsListener
from pgstore.store import PostgresProjectionStore
from pgstore.versions import switch
from projectors.positions_watch import FALLBACK_S, PositionsWatch, parse_positions, positions_payload
from projectors.tokens import TokenCounter
from projectors.window import WindowPolicy
from query_api.http import create_app
from query_api.http.routes_context import VERSION_HEADER
from query_api.live import NotCaughtUpError, wait_for_projection
from query_api.ports import ReadModels
from tests.projection_support import Projection, temporary_database

KEY = ConversationKey("acme", "u", "c")


class Positions:
    """The read models' projection position, set by the test; counts how often it is read."""

    def __init__(self) -> None:
        self.next_offset = 0
        self.reads = 0

    async def projection_position(self, partition: int) -> int:
        self.reads += 1
        return self.next_offset


async def appended(producer: ConversationProducer, log: EmbeddedEventLog) -> tuple[int, int]:
    at = await producer.append_user(KEY, "hi", message_id="m1")
    return partition_for_key(KEY.encode(), log.partition_count), at.offset


async def test_the_wait_ends_at_the_commit_not_at_the_next_poll(
    log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    partition, offset = await appended(producer, log)
    positions, watch = Positions(), PositionsWatch()
    watch.listening = True  # as while the Postgres listener is up: every commit is heard
    reads = cast("ReadModels", positions)
    waiting = asyncio.create_task(wait_for_projection(reads, log, partition, offset, timeout_s=5.0, watch=watch))
    await asyncio.sleep(0.25)  # long enough for a dozen polls
    assert not waiting.done()
    positions.next_offset = offset + 1  # the batch committed ...
    committed = time.perf_counter()
    watch.committed({partition: offset + 1})  # ... and the projector says so
    await waiting
    assert time.perf_counter() - committed < 0.005
    assert watch.met == 1
    # Polling every 20 ms would have read the position a dozen times; the wait woke on the
    # commit, or looked again after the fallback interval (0.1 s) at most.
    assert positions.reads <= 5


async def test_a_commit_the_read_models_do_not_confirm_keeps_the_wait_going(
    log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    """A hint is not the answer: after a switch to another version, say, the live read models
    may not hold the offset yet; the answer comes when they do (the fallback looks again)."""
    partition, offset = await appended(producer, log)
    positions, watch = Positions(), PositionsWatch()
    watch.committed({partition: offset + 1})  # another version's commit
    reads = cast("ReadModels", positions)
    waiting = asyncio.create_task(wait_for_projection(reads, log, partition, offset, timeout_s=5.0, watch=watch))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    positions.next_offset = offset + 1
    await asyncio.wait_for(waiting, 0.5)


async def test_the_wait_is_bounded_with_a_watch_too(log: EmbeddedEventLog, producer: ConversationProducer) -> None:
    partition, offset = await appended(producer, log)
    reads = cast("ReadModels", Positions())
    started = time.monotonic()
    with pytest.raises(NotCaughtUpError) as raised:
        await wait_for_projection(reads, log, partition, offset, timeout_s=0.2, watch=PositionsWatch())
    assert raised.value.retriable  # HTTP 503 (tests/test_api_edge.py)
    assert raised.value.code == "not_caught_up"
    assert raised.value.partition == partition
    assert 0.2 <= time.monotonic() - started < 0.5


async def test_wait_past_answers_false_at_its_timeout_and_true_for_a_commit_past_the_offset() -> None:
    watch = PositionsWatch()
    assert await watch.wait_past(0, 3, 0.01) is False
    waiting = asyncio.create_task(watch.wait_past(0, 3, 1.0))
    watch.committed({0: 3})  # not past offset 3 yet
    watch.committed({1: 9})  # another partition
    await asyncio.sleep(0.01)
    assert not waiting.done()
    watch.committed({0: 4})
    assert await asyncio.wait_for(waiting, 0.1) is True


@pytest.mark.postgres
async def test_serve_answers_a_min_offset_context_at_the_projectors_commit(pg_admin_url: str, tmp_path: Path) -> None:
    """The whole process: ``convlog serve``'s projector wakes the API's read-your-writes wait,
    and the wait is in convlog_freshness_seconds."""
    async with temporary_database(pg_admin_url) as url:
        settings = Settings(
            database_url=url, data_dir=tmp_path, partitions=2, api_tokens="acme:token-a", summarizer="off"
        )
        async with running_service(settings) as service:
            assert service.deps.queries.positions is not None
            transport = httpx.ASGITransport(app=create_app(service.deps))
            headers = {"Authorization": "Bearer token-a"}
            base = "/v1/users/u/conversations/c"
            async with httpx.AsyncClient(transport=transport, base_url="http://convlog", headers=headers) as client:
                for i in range(5):
                    posted = await client.post(f"{base}/messages", json={"role": "user", "content": f"turn {i}"})
                    assert posted.status_code == 202
                    context = await client.get(
                        f"{base}/context",
                        params={"model": "gpt-4o", "budget_tokens": 1000, "min_offset": posted.json()["offset"]},
                    )
                    assert context.status_code == 200, context.text
                    assert context.json()["messages"][-1]["content"] == f"turn {i}"
                metrics = (await client.get("/metrics")).text
            assert service.deps.queries.positions.met >= 1  # woken by the projector's commit, not found by a poll
    assert "convlog_freshness_seconds_count 5.0" in metrics


def test_a_positions_payload_reads_back_and_a_foreign_one_reads_as_nothing() -> None:
    assert parse_positions(positions_payload({3: 40, 0: 12})) == {0: 12, 3: 40}
    assert parse_positions("") == {}
    assert parse_positions("hello") == {}


@pytest.mark.postgres
async def test_a_commit_of_another_process_wakes_a_listening_watch(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    """Across processes: the store NOTIFYs a batch's positions in its transaction; the API's
    listener hears them at the commit. (The store here has a pool of its own, as another
    process would: only Postgres connects the two.)"""
    partition, offset = await appended(producer, log)
    schema = projection.version.schema
    store = PostgresProjectionStore(
        projection.pool,
        schema=schema,
        codec=default_codec(),
        counter=TokenCounter(),
        policy=WindowPolicy(),
        max_event_bytes=1 << 20,
        notify_positions=True,
    )

    async def live_schema() -> str:
        return schema

    watch, stop = PositionsWatch(), asyncio.Event()
    listening = asyncio.create_task(PositionsListener(projection.url, watch, live_schema).run(stop))
    try:
        for _ in range(100):
            if watch.listening:
                break
            await asyncio.sleep(0.02)
        assert watch.listening
        waiting = asyncio.create_task(watch.wait_past(partition, offset, 5.0))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # nothing committed yet
        records = (await log.read({partition: 0}, max_records=10, timeout_s=0)).records
        expected = await store.positions([partition])
        await store.apply(records, expected)
        committed = time.perf_counter()
        assert await asyncio.wait_for(waiting, 1.0) is True
        assert time.perf_counter() - committed < 0.05
        assert watch.passed(partition, offset)
    finally:
        stop.set()
        await asyncio.wait_for(listening, 5)
    assert not watch.listening  # a stopped listener: waits poll again


async def test_without_a_listener_the_local_commit_still_wakes_the_wait_at_once(
    log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    """Listener down: the wait looks at the read models every 20 ms again (a projector of
    another process is heard no other way), and this process's projector still wakes it."""
    partition, offset = await appended(producer, log)
    positions, watch = Positions(), PositionsWatch()
    reads = cast("ReadModels", positions)
    waiting = asyncio.create_task(wait_for_projection(reads, log, partition, offset, timeout_s=5.0, watch=watch))
    await asyncio.sleep(0.2)
    assert positions.reads >= 8  # polling
    positions.next_offset = offset + 1
    committed = time.perf_counter()
    watch.committed({partition: offset + 1})
    await waiting
    assert time.perf_counter() - committed < 0.005


async def test_a_commit_landing_while_the_position_is_read_is_not_missed_for_a_poll(
    log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    """The projector commits (and tells the watch) while the waiter's read of the position is
    under way, so the read still shows the old position: the waiter must look again at once, not
    sleep a poll interval because the watch already said passed before it waited."""
    partition, offset = await appended(producer, log)
    watch = PositionsWatch()
    watch.listening = True

    class CommitDuringRead(Positions):
        async def projection_position(self, partition: int) -> int:
            answer = await super().projection_position(partition)
            if self.reads == 2:  # the wait's first look: the commit lands while it is read
                watch.committed({partition: offset + 1})
                self.next_offset = offset + 1
            return answer

    positions = CommitDuringRead()
    started = time.perf_counter()
    await wait_for_projection(cast("ReadModels", positions), log, partition, offset, timeout_s=5.0, watch=watch)
    assert time.perf_counter() - started < 0.01  # a poll interval is 20 ms
    assert positions.reads == 3


async def test_a_listening_watch_that_says_behind_saves_the_first_read_and_a_stale_one_still_answers(
    log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    """With ``trust_hint`` (the context route) a listening watch that heard the partition's last
    commit, not past the offset, stands in for the first read of the position; the commit's hint
    ends the wait (the route confirms it from the context it reads). A watch that missed commits
    (it says behind, the read models are past) costs one fallback interval, and the read models
    answer."""
    partition, offset = await appended(producer, log)
    watch = PositionsWatch()
    watch.listening = True
    watch.committed({partition: offset})  # heard: the partition is at the offset, not past it
    positions = Positions()
    reads = cast("ReadModels", positions)
    waiting = asyncio.create_task(
        wait_for_projection(reads, log, partition, offset, timeout_s=5.0, watch=watch, trust_hint=True)
    )
    await asyncio.sleep(0.05)
    assert not waiting.done()
    watch.committed({partition: offset + 1})
    assert await asyncio.wait_for(waiting, 0.1) is True
    assert positions.reads == 0

    stale = PositionsWatch()
    stale.listening = True
    stale.committed({partition: offset})
    positions.next_offset = offset + 1  # committed, but this watch never heard it
    started = time.perf_counter()
    reads = cast("ReadModels", positions)
    confirmed = await wait_for_projection(reads, log, partition, offset, timeout_s=5.0, watch=stale, trust_hint=True)
    assert confirmed is False  # the read models' own word
    assert time.perf_counter() - started < FALLBACK_S + 0.05
    stale.forget()  # as a listener does when it starts listening: nothing heard, so nothing trusted
    assert not stale.behind(partition, offset)


@pytest.mark.postgres
async def test_a_switch_reaches_the_api_and_its_projector_at_its_commit(pg_admin_url: str, tmp_path: Path) -> None:
    """``convlog rebuild --switch`` while serve runs: the switch's NOTIFY reaches the API's reads
    and its projector at the commit, so the next read-your-writes request is served by the new
    version at once, instead of waiting out the retired version (which no longer moves) until
    the next look-up of the live version and answering 503 ``not_caught_up``."""
    async with temporary_database(pg_admin_url) as url:
        settings = Settings(
            database_url=url, data_dir=tmp_path, partitions=2, api_tokens="acme:token-a", summarizer="off"
        )
        headers = {"Authorization": "Bearer token-a"}
        base = "/v1/users/u/conversations/c"
        params = {"model": "gpt-4o", "budget_tokens": 1000}
        async with running_service(settings) as service:
            first = await service.deps.producer.append_user(KEY, "before the rebuild", message_id="m0")
        assert await rebuild(settings, RebuildOptions(), asyncio.Event()) == 0  # version 2, built, not live
        async with running_service(settings) as service:
            assert service.deps.queries.positions is not None
            for _ in range(100):
                if service.deps.queries.positions.listening:
                    break
                await asyncio.sleep(0.02)
            transport = httpx.ASGITransport(app=create_app(service.deps))
            async with httpx.AsyncClient(transport=transport, base_url="http://convlog", headers=headers) as client:
                before = await client.get(f"{base}/context", params={**params, "min_offset": first.offset})
                assert before.status_code == 200, before.text
                assert before.headers[VERSION_HEADER] == "1"  # the live version, just looked up
                async with service.pool.connection() as conn:
                    await switch(conn, "read_models", 2)
                await asyncio.sleep(0.1)  # the notification's way to this process
                posted = await client.post(f"{base}/messages", json={"role": "user", "content": "after it"})
                started = time.perf_counter()
                context = await client.get(f"{base}/context", params={**params, "min_offset": posted.json()["offset"]})
                took = time.perf_counter() - started
            assert context.status_code == 200, context.text
            assert context.headers[VERSION_HEADER] == "2"
            assert context.json()["messages"][-1]["content"] == "after it"
            assert took < 1.0  # the projector followed at the commit too, not at its next poll


async def test_a_wait_under_way_at_a_switch_follows_the_new_version(
    log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    """A read-your-writes wait that began on the retired version (which no longer moves) reads
    the positions of the version live at each look: it ends when the new version passes the
    offset, not at its 5 s bound with 503 ``not_caught_up``."""
    partition, offset = await appended(producer, log)
    retired, new = Positions(), Positions()
    live = [retired]

    async def live_reads() -> ReadModels:
        return cast("ReadModels", live[0])

    reads = cast("ReadModels", retired)
    waiting = asyncio.create_task(
        wait_for_projection(reads, log, partition, offset, timeout_s=5.0, watch=PositionsWatch(), follow=live_reads)
    )
    await asyncio.sleep(0.1)
    live[0], new.next_offset = new, offset + 1  # the switch: the new version has the record
    started = time.perf_counter()
    assert await asyncio.wait_for(waiting, 1.0) is False  # the read models' own word
    assert time.perf_counter() - started < 0.1
    assert new.reads >= 1
