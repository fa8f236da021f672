"""Fixtures of the cluster tests: one private three-node Kafka cluster for the whole session.

API (stable: the failover tests build on it)

``kafka_cluster`` (session scope) — a :class:`devservices.kafka_cluster.KafkaCluster`, started
once for every test under ``tests/cluster`` on free loopback ports of its own (never the dev
services' 19092..) with its data in a session temp dir, and killed at the end of the session
whatever the tests did (no JVM outlives pytest: a reaper process kills them even when pytest
itself is killed). It is killed already after the last test that uses it, so that it does not
idle through the rest of the suite. How long it took to start is printed in the
terminal summary ("cluster figures": "kafka cluster: started in ...") and kept in ``kafka_cluster.started_in_s``.
It is gated like the single broker (``kafka_bootstrap`` in tests/conftest.py): without
``CONVLOG_KAFKA_BOOTSTRAP`` the cluster tests skip; if the cluster cannot start they skip too,
except under ``CONVLOG_REQUIRE_SERVICES=1`` (``.ci/run``), where both fail the run.

  - ``kafka_cluster.bootstrap`` — "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3" for any Kafka client.
  - ``kafka_cluster.nodes`` / ``kafka_cluster.node(k)`` — :class:`ClusterNode` k = 1..3 with
    ``node_id``, ``port``, ``bootstrap``, ``running``, ``pid``, ``kill()`` (kill -9), ``stop()``
    (controlled shutdown), ``start()`` (same data; returns once the node is registered again).
  - ``kafka_cluster.leader(topic, partition)`` — the node leading it now (None while none does);
    ``kafka_cluster.partition(topic, partition)`` — its leader, replicas and ISR;
    ``kafka_cluster.wait_for_leader(topic, partition, not_on=k)`` — until a running node other
    than k leads it (the failover); ``kafka_cluster.wait_in_sync()`` — until every node runs and
    every partition has a leader and its full ISR. These block (a Metadata request on a socket):
    from async tests call them with ``await asyncio.to_thread(...)``.

``healthy_cluster`` (function scope) — the same cluster, healthy when the test starts, and made
healthy again after it: every node the test killed or stopped is started, and the test ends only
once every partition is back to its full ISR of 3 (unless no later test uses the cluster).
Use it in every test that kills or stops a node.

``cluster_figure`` (function scope) — ``cluster_figure("failover: 3.1 s")`` prints a measured
figure and repeats it, with the test's name, in the "cluster figures" section of the terminal
summary (shown without ``-s``), beside the cluster's start time.

``cluster_event_log`` (function scope) — a :class:`KafkaEventLog` on a fresh topic of the
cluster (12 partitions; replication 3 and ``min.insync.replicas=2`` as convlog creates topics).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from convlog.embedded.processes import ServiceError, spawn_detached
from devservices.kafka_cluster import KafkaCluster
from events.kafka_log import KafkaEventLog
from tests.support import free_port, services_required, unique_topic

RESTORE_TIMEOUT_S = 120.0
_FIGURES_KEY = pytest.StashKey[list[str]]()

# Kills the cluster's JVMs once this pytest process is gone, however it ended (a SIGKILL, an
# OOM kill, a CI timeout run no finalizer): no JVM may outlive the session on a shared machine.
_REAPER = """
import os, signal, sys, time
from pathlib import Path
session, data_dir = int(sys.argv[1]), sys.argv[2]

def alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")

while alive(session):
    time.sleep(1)
for pid_file in Path(data_dir).glob("node-*/kafka.pid"):
    try:
        pid = int(pid_file.read_text().split()[0])
        if data_dir in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
            os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError, IndexError):
        pass
"""


def _private_ports() -> list[tuple[int, int]]:
    """Six distinct free ports: parallel sessions (other worktrees, CI) must not collide."""
    ports: set[int] = set()
    while len(ports) < 6:
        ports.add(free_port())
    chosen = sorted(ports)
    return [(chosen[i], chosen[i + 1]) for i in range(0, 6, 2)]


@pytest.fixture(scope="session")
def kafka_cluster(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[KafkaCluster]:
    del kafka_bootstrap  # a gate only: cluster tests run where Kafka tests run
    # Laid out as the dev services lay out theirs (CONVLOG_DATA_DIR=<root>): the devservices CLI
    # is tested against this cluster rather than a second one.
    data_dir = Path(tmp_path_factory.mktemp("kafka-cluster")) / "services" / "kafka-cluster"
    cluster = KafkaCluster(data_dir, ports=_private_ports())
    reaper_argv = [sys.executable, "-c", _REAPER, str(os.getpid()), str(cluster.data_dir)]
    spawn_detached(reaper_argv, data_dir.parent / "reaper.log", cwd=data_dir.parent.parent)
    began = time.monotonic()
    try:
        cluster.start(timeout=float(os.environ.get("CONVLOG_TEST_CLUSTER_TIMEOUT", "180")))
    except ServiceError as exc:
        cluster.kill()
        if services_required():
            pytest.fail(f"CONVLOG_REQUIRE_SERVICES=1 but the three-node Kafka cluster did not start: {exc}")
        pytest.skip(f"the three-node Kafka cluster did not start: {exc}")
    started = f"kafka cluster: started in {time.monotonic() - began:.1f}s ({cluster.bootstrap}, data {data_dir})"
    request.config.stash.setdefault(_FIGURES_KEY, []).insert(0, started)
    try:
        yield cluster
    finally:
        cluster.kill()  # the data is thrown away: no need for a controlled shutdown


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    figures = config.stash.get(_FIGURES_KEY, [])
    if figures:
        terminalreporter.section("cluster figures")
        for line in figures:
            terminalreporter.write_line(line)


@pytest.fixture
def cluster_figure(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """``cluster_figure("leader failover: ...")``: a measured figure, printed at once and again in
    the terminal summary (without ``-s`` too), so that CI logs carry it."""
    figures = request.config.stash.setdefault(_FIGURES_KEY, [])

    def record(line: str) -> None:
        print(line)
        figures.append(f"{request.node.name}: {line}")

    return record


def _last_user(item: pytest.Item) -> bool:
    """True if no test after ``item`` in this session uses the cluster."""
    users = [i for i in item.session.items if "kafka_cluster" in getattr(i, "fixturenames", ())]
    return bool(users) and users[-1] is item


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Kill the cluster right after the last test that uses it, not at the end of the session:
    idle, its three JVMs hold ~1 GB and a tenth of a core while the rest of the suite runs."""
    del nextitem
    cluster = getattr(item, "funcargs", {}).get("kafka_cluster")
    if isinstance(cluster, KafkaCluster) and _last_user(item):
        cluster.kill()


def _restore(cluster: KafkaCluster) -> None:
    cluster.start(timeout=RESTORE_TIMEOUT_S)
    cluster.wait_in_sync(RESTORE_TIMEOUT_S)


@pytest.fixture
def healthy_cluster(kafka_cluster: KafkaCluster, request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    _restore(kafka_cluster)
    yield kafka_cluster
    if not _last_user(request.node):  # else it is killed right after this test: nothing to restore
        _restore(kafka_cluster)


@pytest.fixture
async def cluster_event_log(kafka_cluster: KafkaCluster) -> AsyncIterator[KafkaEventLog]:
    log = await KafkaEventLog.connect(
        bootstrap=kafka_cluster.bootstrap, topic=unique_topic("cluster"), partitions=12, append_timeout_s=20
    )
    yield log
    await log.close()
