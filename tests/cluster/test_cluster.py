"""convlog on a three-node Kafka cluster: the topic it creates is replicated three times with two
in-sync replicas required, and an acknowledged append survives a kill -9 of its partition's
leader — it is read back and projected from the surviving nodes, and the killed node rejoins."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from convlog.embedded.processes import ServiceError
from convlog.settings import Settings
from convlog.wiring import make_producer
from devservices.kafka_cluster import ClusterNode, KafkaCluster
from events.codec import default_codec
from events.errors import ConvlogError
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from events.producer import Appended, ConversationProducer
from events.reading import conversation_events
from tests.projection_support import Projection, project_all
from tests.support import unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

KEY = ConversationKey("acme", "u1", "failover")


async def min_insync_replicas(bootstrap: str, topic: str) -> str:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        wanted = ConfigResource(ConfigResourceType.TOPIC, topic, configs={"min.insync.replicas": None})
        [response] = await admin.describe_configs([wanted])
    finally:
        await admin.close()
    [resource] = response.to_object()["resources"]
    return str({e["config_names"]: e["config_value"] for e in resource["config_entries"]}["min.insync.replicas"])


async def test_the_convlog_topic_has_three_replicas_and_needs_two_in_sync(
    kafka_cluster: KafkaCluster, cluster_event_log: KafkaEventLog
) -> None:
    topic = cluster_event_log.topic
    metadata = await asyncio.to_thread(kafka_cluster.metadata, [topic])
    assert len(metadata.partitions) == 12
    assert all(sorted(p.replicas) == [1, 2, 3] for p in metadata.partitions), metadata.partitions
    assert len({p.leader for p in metadata.partitions}) == 3, "leaderships are spread over the nodes"
    assert await min_insync_replicas(kafka_cluster.bootstrap, topic) == "2"
    # What makes an acknowledgement mean "on two nodes": the producer waits for every in-sync
    # replica (acks=all, -1 on the wire), and idempotence keeps its own retries from doubling.
    producer = cluster_event_log._producer  # the settings live on aiokafka's producer
    assert producer._sender._acks == -1
    assert producer._txn_manager is not None  # aiokafka's idempotence state


async def append_until_acknowledged(producer: ConversationProducer, text: str, event_id: str) -> Appended:
    """What a client does: retry a retriable failure with the same event id."""
    for _ in range(5):
        try:
            return await producer.append_user(KEY, text, event_id=event_id, message_id=event_id)
        except ConvlogError as e:
            if not e.retriable:
                raise
            await asyncio.sleep(0.5)
    raise AssertionError(f"{event_id} was never acknowledged")


async def test_an_acknowledged_append_survives_a_kill_of_its_leader(
    healthy_cluster: KafkaCluster,
    cluster_event_log: KafkaEventLog,
    projection: Projection,
    cluster_figure: Callable[[str], None],
) -> None:
    cluster, topic = healthy_cluster, cluster_event_log.topic
    producer = make_producer(cluster_event_log, Settings(), producer="cluster-test")
    before = [await append_until_acknowledged(producer, f"before {i}", f"before-{i}") for i in range(20)]
    partition = before[0].coordinates.partition
    leader = await asyncio.to_thread(cluster.leader, topic, partition)
    assert leader is not None

    killed_at = time.monotonic()
    leader.kill()

    async def new_leader_elected() -> float:
        await asyncio.to_thread(cluster.wait_for_leader, topic, partition, not_on=leader.node_id)
        return time.monotonic() - killed_at

    async def acknowledged_after_the_kill() -> tuple[Appended, float]:
        appended = await append_until_acknowledged(producer, "after the leader died", "after-0")
        return appended, time.monotonic() - killed_at

    elected_s, (after, first_ack_s) = await asyncio.gather(new_leader_elected(), acknowledged_after_the_kill())
    state = await asyncio.to_thread(cluster.partition, topic, partition)
    assert state.leader != leader.node_id
    assert sorted(state.isr) == sorted({1, 2, 3} - {leader.node_id}), "the dead node left the ISR; two remain"
    cluster_figure(
        f"leader failover: node {leader.node_id} -> {state.leader}: new leader after {elected_s:.1f}s, "
        f"first acknowledged append after {first_ack_s:.1f}s"
    )

    survivors = ",".join(n.bootstrap for n in cluster.nodes if n.running)
    reader = await KafkaEventLog.connect(bootstrap=survivors, topic=topic, partitions=12)
    try:
        read_back = [event.event_id async for _, event in conversation_events(reader, KEY, codec=default_codec())]
        assert read_back == [a.event_id for a in before] + [after.event_id], "every acknowledged append, once, in order"
        await project_all(reader, projection.store())
    finally:
        await reader.close()
    query = "SELECT message_id FROM {s}.transcript WHERE conversation_key = %s ORDER BY seq"
    rows = await projection.rows(query, str(KEY))
    assert [r[0] for r in rows] == read_back

    restarted_at = time.monotonic()
    await asyncio.to_thread(leader.start)
    await asyncio.to_thread(cluster.wait_in_sync, 60)
    state = await asyncio.to_thread(cluster.partition, topic, partition)
    assert sorted(state.isr) == [1, 2, 3], "the restarted node caught up and is in sync again"
    cluster_figure(f"node {leader.node_id} restarted and back in sync in {time.monotonic() - restarted_at:.1f}s")


async def test_an_append_is_not_acknowledged_while_only_one_replica_holds_it(
    healthy_cluster: KafkaCluster, projection: Projection, cluster_figure: Callable[[str], None]
) -> None:
    """acks=all with min.insync.replicas=2: one live replica is not enough to acknowledge —
    with acks=1, or a minimum of 1, this append would be acknowledged on one node alone."""
    cluster, topic = healthy_cluster, unique_topic("two-replicas")
    log = await KafkaEventLog.connect(
        bootstrap=cluster.bootstrap, topic=topic, partitions=3, replication_factor=2, append_timeout_s=4
    )
    try:
        assert await min_insync_replicas(cluster.bootstrap, topic) == "2"  # min(2, replicas)
        producer = make_producer(log, Settings(), producer="cluster-test")
        first = await append_until_acknowledged(producer, "two copies", "two-0")
        partition = first.coordinates.partition
        state = await asyncio.to_thread(cluster.partition, topic, partition)
        leader = cluster.node(state.leader)
        [follower] = [cluster.node(r) for r in state.replicas if r != state.leader]
        follower.kill()
        await asyncio.to_thread(_wait_for_isr, leader, topic, partition, [leader.node_id])

        with pytest.raises(ConvlogError) as refused:
            await producer.append_user(KEY, "one copy only", event_id="two-1", message_id="two-1")
        assert refused.value.retriable, "the client retries it with the same event id"

        await asyncio.to_thread(follower.start)
        await append_until_acknowledged(producer, "one copy only", "two-1")
        read_back = [e.event_id async for _, e in conversation_events(log, KEY, codec=default_codec())]
        await project_all(log, projection.store())
    finally:
        await log.close()
    # A refused append may still be in the log (the leader took it in before it learnt that its
    # follower was gone, and the follower copied it when it came back): the retry with the same
    # event id then stores it twice, and the projection applies it once.
    assert read_back[0] == "two-0"
    assert set(read_back) == {"two-0", "two-1"}
    rows = await projection.rows("SELECT message_id FROM {s}.transcript WHERE conversation_key = %s", str(KEY))
    assert sorted(r[0] for r in rows) == ["two-0", "two-1"]
    cluster_figure(f"one replica in sync: append refused; the retried event is {read_back.count('two-1')}x in the log")


def _wait_for_isr(leader: ClusterNode, topic: str, partition: int, isr: list[int], timeout: float = 30.0) -> None:
    """Until the leader itself (not just some node) has the partition's ISR as ``isr``."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, ServiceError):
            state = leader.metadata(topics=[topic]).partition(topic, partition)
            if state is not None and sorted(state.isr) == sorted(isr):
                return
        assert time.monotonic() < deadline, f"{topic}[{partition}] ISR is not {isr} after {timeout:.0f}s"
        time.sleep(0.1)
