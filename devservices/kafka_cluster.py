"""A local three-node Kafka cluster (KRaft) for development and tests, from the same Maven jars as
the single broker of :mod:`devservices.kafka_service`.

Layout: three combined nodes, each a broker *and* a voter of a three-voter controller quorum
(static ``controller.quorum.voters``), one JVM per node. Any one node may die — a controlled stop
or a ``kill -9`` — and both the quorum (two voters of three are a majority) and every partition
stay available: topics get three replicas and ``min.insync.replicas=2``, so an ``acks=all``
write is acknowledged only once two nodes hold it, and one of those two survives. The internal
topics (consumer offsets, transaction state) get the same replication. Two nodes down stop
writes (one in-sync replica is below the minimum) and the controller (no majority): the
cluster tolerates one failure, as a production cluster of three does.

Node ``k`` (1..3) listens on 127.0.0.1 only: clients on ``ports[k-1][0]``, the controller
quorum on ``ports[k-1][1]`` (:func:`cluster_ports` lays them out from one base port: 19092..19097
for the dev services). Each node's data lives in ``data_dir/node-k`` (formatted once with the
cluster id recorded in ``data_dir/cluster.json``); a node started again after a kill recovers its
log from that directory and rejoins — the controller fences a dead node after
``broker.session.timeout.ms`` (3 s here) and moves its leaderships to in-sync followers.

Sized for a small machine: at most 320 MB of heap per JVM (-Xms64m), two network and two I/O
threads, one replica fetcher, fewer internal-topic partitions.

The leader of a partition and the in-sync replicas come from a Metadata request
(:mod:`devservices.kafka_wire`: a socket, no Kafka client, no event loop). The waits here
block: from async code, run them with ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import json
import struct
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from convlog.embedded.processes import HOST, PortTakenError, ServiceError, StoppedOnExit
from convlog.settings import Settings
from devservices.kafka_service import KafkaHandle, _cluster_id, kafka_classpath
from devservices.kafka_wire import ClusterMetadata, PartitionState, cluster_metadata

NODES = 3
HEAP = "320m"


def cluster_ports(base: int, nodes: int = NODES) -> list[tuple[int, int]]:
    """(client port, controller port) of each node: base, base+1 for node 1, base+2, base+3 for node 2, ..."""
    return [(base + 2 * i, base + 2 * i + 1) for i in range(nodes)]


class ClusterNode(KafkaHandle):
    """One node (broker + controller voter) of a :class:`KafkaCluster`: ``kill()`` is a kill -9,
    ``stop()`` a controlled shutdown, ``start()`` brings it back on the same data."""

    min_heap = "64m"

    def __init__(
        self,
        data_dir: Path,
        *,
        node_id: int,
        port: int,
        controller_port: int,
        voters: str,
        cluster_id: str,
        heap: str = HEAP,
        settings: Settings | None = None,
    ) -> None:
        super().__init__(data_dir, port=port, controller_port=controller_port, heap=heap, settings=settings)
        self.node_id = node_id
        self.voters = voters
        self.cluster_id = cluster_id

    def _server_properties(self, kraft: Path) -> str:
        return "\n".join(
            [
                "process.roles=broker,controller",
                f"node.id={self.node_id}",
                f"controller.quorum.voters={self.voters}",
                f"listeners=PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                f"log.dirs={kraft}",
                "num.partitions=12",
                "default.replication.factor=3",
                "min.insync.replicas=2",
                "offsets.topic.replication.factor=3",
                "offsets.topic.num.partitions=12",
                "transaction.state.log.replication.factor=3",
                "transaction.state.log.min.isr=2",
                "transaction.state.log.num.partitions=6",
                "share.coordinator.state.topic.replication.factor=3",
                "share.coordinator.state.topic.min.isr=2",
                "unclean.leader.election.enable=false",
                "group.initial.rebalance.delay.ms=0",
                # A dead node is fenced (and its leaderships move) once its session expires; a
                # node restarted after kill -9 can register again only then: keep both short.
                "broker.heartbeat.interval.ms=500",
                "broker.session.timeout.ms=3000",
                "auto.create.topics.enable=false",
                # Three JVMs share two cores here.
                "num.network.threads=2",
                "num.io.threads=2",
                "num.replica.fetchers=1",
                "background.threads=2",
                "num.recovery.threads.per.data.dir=1",
                "",
            ]
        )

    def _format_storage(self, java: list[str], props: Path, state: dict[str, Any]) -> dict[str, Any]:
        """Format for the static three-voter quorum (no ``--standalone``), with the cluster's id."""
        argv = [*java, "-Xmx256m", "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(props)]
        del state  # the cluster, not the node, keeps the id
        result = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
        if result.returncode != 0:
            raise ServiceError(f"kafka storage format of node {self.node_id} failed:\n{result.stdout}{result.stderr}")
        return {"cluster_id": self.cluster_id, "controller_port": self.controller_port}

    def expected_cluster_id(self) -> str | None:
        return self.cluster_id

    def metadata(self, timeout: float = 2.0, topics: list[str] | None = None) -> ClusterMetadata:
        """What this node's metadata cache says (ServiceError/OSError if it does not answer)."""
        return cluster_metadata(HOST, self.port, timeout, topics)

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until this node serves requests and is a registered, unfenced broker of the cluster."""
        deadline = time.monotonic() + timeout
        error: object = None
        while time.monotonic() < deadline:
            if not self._still_running():
                raise ServiceError(f"Kafka node {self.node_id} exited during start-up:\n{self.log_tail()}")
            try:
                metadata = self.metadata()
                self.ensure_ours(metadata)
                brokers = metadata.brokers
                if self.node_id in brokers:
                    return
                error = f"brokers {list(brokers)} do not include node {self.node_id} yet"
            except PortTakenError:
                raise
            except (OSError, ServiceError, struct.error) as exc:
                error = exc
            time.sleep(0.2)
        raise ServiceError(
            f"Kafka node {self.node_id} not ready on {self.bootstrap} after {timeout:.0f}s ({error}):\n"
            f"{self.log_tail()}"
        )

    def _still_running(self) -> bool:
        """``running``, asked again before answering no: on a loaded machine one look at /proc
        has been seen to miss a node that was starting (its pid alive a moment later)."""
        for _ in range(5):
            if self.running:
                return True
            time.sleep(0.1)
        return False

    def __repr__(self) -> str:
        return f"ClusterNode({self.node_id}, bootstrap={self.bootstrap!r}, pid={self.pid})"


class KafkaCluster(StoppedOnExit):
    """Three :class:`ClusterNode` s in ``data_dir``; ``ports`` (client, controller) per node, by
    default those recorded when the cluster was first made, else :func:`cluster_ports` (19092)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        ports: Sequence[tuple[int, int]] | None = None,
        heap: str = HEAP,
        settings: Settings | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.state_file = self.data_dir / "cluster.json"
        state = self._state()
        recorded = [tuple(p) for p in state.get("ports", ())]
        chosen = [tuple(p) for p in ports] if ports is not None else recorded or cluster_ports(19092)
        if len(chosen) != NODES:
            raise ServiceError(f"a cluster has {NODES} nodes, got ports for {len(chosen)}")
        self.ports: list[tuple[int, int]] = [(int(p[0]), int(p[1])) for p in chosen]
        self.cluster_id: str = state.get("cluster_id") or _cluster_id()
        voters = ",".join(f"{k}@{HOST}:{c}" for k, (_, c) in enumerate(self.ports, start=1))
        self.nodes = [
            ClusterNode(
                self.data_dir / f"node-{k}",
                node_id=k,
                port=port,
                controller_port=controller,
                voters=voters,
                cluster_id=self.cluster_id,
                heap=heap,
                settings=settings,
            )
            for k, (port, controller) in enumerate(self.ports, start=1)
        ]
        self.started_in_s: float | None = None  # how long the last start() took to readiness

    def _state(self) -> dict[str, Any]:
        if not self.state_file.is_file():
            return {}
        try:
            state = json.loads(self.state_file.read_text())
        except ValueError as e:
            raise ServiceError(f"{self.state_file} is damaged ({e}); delete the cluster's directory") from e
        if not isinstance(state, dict):
            raise ServiceError(f"{self.state_file} is not a JSON object; delete the cluster's directory")
        return state

    @property
    def bootstrap(self) -> str:
        """Every node's client address, comma-joined (clients find the others from any one)."""
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def running(self) -> bool:
        """True when every node runs."""
        return all(node.running for node in self.nodes)

    @property
    def pid(self) -> int | None:
        """The pid of some running node, None when none runs."""
        return next((pid for pid in (node.pid for node in self.nodes) if pid is not None), None)

    def node(self, node_id: int) -> ClusterNode:
        return self.nodes[node_id - 1]

    def start(self, *, timeout: float = 180.0, wait: bool = True) -> KafkaCluster:
        """Start every node that does not run, all at once (on a fresh cluster no node is ready before
        two controllers form a quorum); with ``wait``, return once all are registered brokers."""
        began = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps({"cluster_id": self.cluster_id, "ports": self.ports}))
        stopped = [node for node in self.nodes if not node.running]
        if stopped:  # resolve the classpath once, before the nodes' threads would each run Maven
            kafka_classpath(stopped[0].classpath_cache, stopped[0].settings)
        _each(stopped, lambda node: node.start(wait=False))  # formatting runs a JVM per node: in parallel
        if wait:
            self.wait_ready(timeout)
            self.started_in_s = time.monotonic() - began
        return self

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Until every node is a registered broker that serves requests."""
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            node.wait_ready(max(deadline - time.monotonic(), 1.0))

    def stop(self, timeout: float = 30.0) -> bool:
        """Controlled shutdown of every node at once (SIGKILL after ``timeout``). True if all stopped
        by themselves."""
        results = _each(self.nodes, lambda node: node.stop(timeout))
        return all(results)

    def kill(self) -> None:
        """SIGKILL every node."""
        _each(self.nodes, lambda node: node.kill())

    def metadata(self, topics: list[str] | None = None) -> ClusterMetadata:
        """The metadata as the first running node that answers knows it."""
        error: object = "no node runs"
        for node in self.nodes:
            if node.running:
                try:
                    return node.metadata(topics=topics)
                except (OSError, ServiceError, struct.error) as exc:
                    error = exc
        raise ServiceError(f"no node of the cluster answers a Metadata request ({error})")

    def partition(self, topic: str, partition: int) -> PartitionState:
        state = self.metadata([topic]).partition(topic, partition)
        if state is None:
            raise ServiceError(f"{topic}[{partition}] is not in the cluster's metadata")
        return state

    def leader(self, topic: str, partition: int) -> ClusterNode | None:
        """The node that leads ``topic[partition]`` now (None while it has no leader)."""
        leader = self.partition(topic, partition).leader
        return self.node(leader) if 1 <= leader <= NODES else None

    def wait_for_leader(
        self, topic: str, partition: int, *, not_on: int | None = None, timeout: float = 60.0
    ) -> ClusterNode:
        """Until ``topic[partition]`` has a leader on a running node (other than node ``not_on``)."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError, ServiceError, struct.error):  # nodes come and go
                node = self.leader(topic, partition)
                if node is not None and node.node_id != not_on and node.running:
                    return node
            if time.monotonic() > deadline:
                raise ServiceError(f"{topic}[{partition}] has no new leader after {timeout:.0f}s")
            time.sleep(0.1)

    def wait_in_sync(self, timeout: float = 120.0) -> None:
        """Until every node runs and, as every node sees it, every partition of every topic has a
        leader and all its replicas in sync: a cluster as healthy as after a clean start."""
        deadline = time.monotonic() + timeout
        lagging: object = None
        while time.monotonic() < deadline:
            lagging = self._out_of_sync()
            if not lagging:
                return
            time.sleep(0.2)
        raise ServiceError(f"the cluster is not in sync after {timeout:.0f}s: {lagging}")

    def _out_of_sync(self) -> object:
        for node in self.nodes:
            if not node.running:
                return f"node {node.node_id} does not run"
            try:
                metadata = node.metadata()
            except (OSError, ServiceError, struct.error) as exc:
                return f"node {node.node_id}: {exc}"
            if len(metadata.brokers) != NODES:
                return f"node {node.node_id} sees brokers {list(metadata.brokers)}"
            for p in metadata.partitions:
                if p.leader < 0 or set(p.isr) != set(p.replicas):
                    return f"node {node.node_id} sees {p}"
        return None

    def __repr__(self) -> str:
        return f"KafkaCluster({str(self.data_dir)!r}, bootstrap={self.bootstrap!r})"


def _each(nodes: Sequence[ClusterNode], action: Any) -> list[Any]:
    """``action(node)`` for every node in threads of its own; the first error is raised after all ended."""
    results: list[Any] = [None] * len(nodes)
    errors: list[BaseException] = []

    def run(i: int, node: ClusterNode) -> None:
        try:
            results[i] = action(node)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i, n)) for i, n in enumerate(nodes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def start_cluster(
    data_dir: Path, *, ports: Sequence[tuple[int, int]], timeout: float = 180.0, heap: str = HEAP
) -> KafkaCluster:
    """Start (formatting on first use) a three-node cluster in ``data_dir`` on ``ports``."""
    return KafkaCluster(data_dir, ports=ports, heap=heap).start(timeout=timeout)
