"""The leader of the busiest partition dies (kill -9) while producers append through two
``convlog serve`` instances, and comes back later.

What must hold, as a user relies on it: every acknowledged append is in the log exactly once
(the topic read back, event id by event id); the producers' client sees only retriable
failures, which it retries with the same Idempotency-Key, and never gives up; contexts are
served during and after the failover; at the end the read models equal a clean rebuild of the
log (``convlog verify --all``). The figures — acknowledged vs stored, the failed tries, how long
the partition had no leader and its appends stalled, the append latency — are printed.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from convlog.client import AsyncConvlogClient
from devservices.kafka_cluster import KafkaCluster
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey, partition_for_key
from events.producer import ConversationProducer
from events.reading import conversation_events
from tests.cluster.appends_under_load import (
    AppendLoad,
    Deployment,
    Fault,
    KillPartitionLeader,
    longest_gap,
    percentiles,
    serve_instances,
    stored_event_ids,
)
from tests.live_server import TOKEN
from tests.projection_support import temporary_database
from tests.support import unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

PARTITIONS = 6
PRODUCERS = 12
WARMUP_S = 6.0  # load before the fault: every conversation has acknowledged appends
DOWN_S = 15.0  # the broker stays dead this long: longer than a leader election
AFTER_S = 6.0  # load after the broker is back
RESUMED_ACKS = 20  # appends to the victim partition acknowledged after the restart, at least
# Half the producers keep the client's default per-try timeout, half give a try less than the
# failover takes: their tries time out and are retried with the same Idempotency-Key.
CLIENT_TIMEOUTS_S = (10.0, 10.0, 2.5, 2.5)  # by producer % 4: each instance serves both kinds
RETRIABLE_STATUSES = frozenset({"429", "502", "503", "504"})


@pytest.fixture
async def deployment(healthy_cluster: KafkaCluster, pg_admin_url: str, tmp_path: Path) -> AsyncIterator[Deployment]:
    """A fresh topic on the three-node cluster (replication 3, min ISR 2, as serve creates it)
    and a fresh database."""
    async with temporary_database(pg_admin_url) as url:
        yield Deployment(healthy_cluster.bootstrap, url, unique_topic("failover"), PARTITIONS, tmp_path)


@pytest.fixture
def fault(healthy_cluster: KafkaCluster, deployment: Deployment) -> Fault:
    return KillPartitionLeader(healthy_cluster, deployment.topic)


def retriable(what: str) -> bool:
    """Whether a failed try (``"503 log_unavailable"``, ``"ReadTimeout"``) is one the client retries."""
    status = what.split(" ", 1)[0]
    return status in RETRIABLE_STATUSES or not status.isdigit()


async def test_acknowledged_appends_survive_the_partition_leaders_death_exactly_once(
    deployment: Deployment, fault: Fault, cluster_figure: Callable[[str], None]
) -> None:
    with serve_instances(deployment, 2) as urls:
        load = AppendLoad(urls, producers=PRODUCERS, timeouts_s=CLIENT_TIMEOUTS_S)
        load.start()
        await asyncio.sleep(WARMUP_S)
        victim = load.record.busiest_partition()
        killed = time.monotonic()
        await fault.inject(victim)
        await asyncio.sleep(DOWN_S)
        healed = time.monotonic()
        await fault.heal()
        deadline = time.monotonic() + 60
        while sum(a.started > healed for a in load.record.acks_on(victim)) < RESUMED_ACKS:
            assert time.monotonic() < deadline, f"appends to partition {victim} did not resume after the restart"
            await asyncio.sleep(0.2)
        await asyncio.sleep(AFTER_S)
        await load.stop()
        record = load.record
        transcripts = await _transcripts(urls, load)
    stored = await stored_event_ids(deployment.bootstrap, deployment.topic, PARTITIONS)
    verified = deployment.run("verify", "--all")

    acked = Counter(a.event_id for a in record.acks)
    during = [a.latency_s for a in record.acks if killed <= a.started <= healed]
    figures = {
        "fault": fault.name,
        "victim partition": victim,
        "acknowledged": len(record.acks),
        "stored records": sum(stored.values()),
        "distinct stored ids": len(stored),
        "acknowledged on victim": len(record.acks_on(victim)),
        "failed tries (retried)": dict(Counter(t.what for t in record.failed_tries)),
        "gave up": dict(Counter(f"{_partition(g.event_id, load)}: {g.error.code}" for g in record.gave_up)),
        "victim appends stalled s": round(longest_gap(record.acks_on(victim), around=killed), 2),
        **fault.figures(),
        "latency during failover s": {k: round(v, 3) for k, v in percentiles(during).items()},
        "max latency during failover by partition s": {
            p: round(max(a.latency_s for a in record.acks_on(p) if killed <= a.started <= healed), 2)
            for p in sorted({a.partition for a in record.acks if killed <= a.started <= healed})
        },
        "latency overall s": {k: round(v, 3) for k, v in percentiles([a.latency_s for a in record.acks]).items()},
        "contexts served/failed": (
            sum(c.error is None for c in record.contexts),
            sum(c.error is not None for c in record.contexts),
        ),
    }
    cluster_figure("broker failover under load: " + "; ".join(f"{k}: {v}" for k, v in figures.items()))

    # The producers: no failure surfaced, and every failed try was one the client retries.
    assert not record.gave_up, [f"{g.event_id}: {g.error!r}" for g in record.gave_up[:5]] + _serve_errors(deployment)
    assert all(retriable(t.what) for t in record.failed_tries), Counter(t.what for t in record.failed_tries)
    # The log: every acknowledged append exactly once, nothing nobody acknowledged.
    missing = sorted(set(acked) - set(stored))
    doubled = sorted(e for e, n in stored.items() if n > 1)
    assert not missing, f"{len(missing)} acknowledged appends are not in the log: {missing[:5]}"
    assert not doubled, f"{len(doubled)} appends are in the log more than once: {doubled[:5]}"
    unacknowledged = sorted(set(stored) - set(acked))
    assert not unacknowledged, f"the log holds appends nobody acknowledged: {unacknowledged[:5]}"
    # The contexts: served while the partition's leader was dead, and after (read-your-writes).
    failed_reads = [c.error for c in record.contexts if c.error is not None]
    assert all(e.retriable for e in failed_reads), [repr(e) for e in failed_reads if not e.retriable][:5]
    assert any(c.error is None and killed <= c.at <= healed for c in record.contexts), "no context served meanwhile"
    assert any(c.error is None and c.at > healed and c.partition == victim for c in record.contexts)
    # The read models: every conversation's transcript is what was acknowledged, in order, and
    # every table equals a clean rebuild of the log.
    for conversation, ids in transcripts.items():
        assert ids == [a.event_id for a in record.acks if a.conversation == conversation], conversation
    assert verified.returncode == 0, verified.stdout + verified.stderr


def _serve_errors(deployment: Deployment) -> list[str]:
    return [f"{f.name}: {f.read_text()[-4000:]}" for f in sorted(deployment.data_dir.glob("serve*.err"))]


def _partition(event_id: str, load: AppendLoad) -> int:
    """The partition of producer ``p<n>-<seq>``'s conversation."""
    user, conv = load.conversation(int(event_id[1:].split("-", maxsplit=1)[0]))
    return partition_for_key(ConversationKey("acme", user, conv).encode(), PARTITIONS)


async def _transcripts(urls: list[str], load: AppendLoad) -> dict[str, list[str]]:
    """Each conversation's transcript (event ids, in order), read through every instance once
    the read models have its last acknowledged append; the instances must agree."""
    found: dict[str, list[str]] = {}
    for url in urls:
        async with AsyncConvlogClient(url, token=TOKEN, timeout=30) as client:
            for p, last in load.last.items():
                user, conv = load.conversation(p)
                await client.context(user, conv, model="gpt-4o", budget_tokens=4000, min_offset=last.offset)
                pages = [page async for page in client.message_pages(user, conv, limit=500)]
                ids = [m.event_id for page in reversed(pages) for m in page.messages]
                assert found.setdefault(last.conversation, ids) == ids, f"{url} disagrees on {last.conversation}"
    return found


async def test_a_leaderless_partition_holds_up_no_other_partitions_reads(healthy_cluster: KafkaCluster) -> None:
    """What an append's idempotency look-up does — read its conversation's partition to the end
    (:func:`conversation_events`) — answers at once for a partition whose leader lives while
    another partition has no leader. (It used to ask for every partition's end offset, and
    aiokafka answers that only once every partition has a leader: one dead broker stalled the
    appends to every partition for the whole election.)"""
    topic = unique_topic("leaderless")
    log = await KafkaEventLog.connect(bootstrap=healthy_cluster.bootstrap, topic=topic, partitions=PARTITIONS)
    try:
        leaders = {p: await asyncio.to_thread(healthy_cluster.leader, topic, p) for p in range(PARTITIONS)}
        victim = 0
        dead = leaders[victim]
        assert dead is not None
        alive = next(p for p, n in leaders.items() if n is not None and n.node_id != dead.node_id)
        key = next(
            k
            for k in (ConversationKey("acme", "u", f"c{i}") for i in range(1000))
            if partition_for_key(k.encode(), PARTITIONS) == alive
        )
        producer = ConversationProducer(log, producer="leaderless-test")
        for i in range(3):
            await producer.append_user(key, f"message {i}", event_id=f"m{i}")
        assert len([e async for e in conversation_events(log, key)]) == 3  # the reader knows the cluster
        dead.kill()
        began = time.monotonic()
        read = [e async for e in conversation_events(log, key)]
        took = time.monotonic() - began
        still = await asyncio.to_thread(healthy_cluster.leader, topic, victim)
    finally:
        await log.close()
    assert len(read) == 3
    assert took < 1.0, f"reading partition {alive} took {took:.2f}s while partition {victim} had no leader"
    assert still is None or still.node_id == dead.node_id, "the election ended first: the test proves nothing"
