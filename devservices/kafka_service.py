"""A local single-node Kafka broker (KRaft, broker+controller in one JVM) for development and tests.

The broker's classpath is resolved with Maven from ``devservices/_services/kafka/pom.xml`` (data of
this dev-only package, found with importlib.resources in a checkout; jars cached in
``~/.m2``, the resulting classpath cached next to the data directories), the storage is formatted
once with ``kafka.tools.StorageTool format --standalone`` and the broker runs as a detached
``java -cp ... kafka.Kafka server.properties`` (own session, output to files, pid file).

Its process helpers are :mod:`convlog.embedded.processes`', shared with the embedded Postgres.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import time
import uuid
from importlib import resources
from pathlib import Path
from typing import Any

from convlog.embedded.processes import (
    HOST,
    PortTakenError,
    ServiceError,
    StoppedOnExit,
    cmdline,
    ensure_port_free,
    kill_tree,
    pid_alive,
    process_tree,
    progress,
    read_pid,
    services_root,
    spawn_detached,
    stop_process,
    tail,
)
from convlog.settings import Settings
from devservices.kafka_wire import ClusterMetadata, cluster_metadata


def kafka_pom(settings: Settings | None = None) -> Path:
    """``CONVLOG_SERVICES_KAFKA_POM`` if it names a file, else the pom in ``devservices/_services/kafka/``."""
    # A checkout's package is a directory: the resource is a file Maven can read.
    packaged = resources.files("devservices").joinpath("_services", "kafka", "pom.xml")
    for candidate in ((settings or Settings.from_env()).services_kafka_pom, str(packaged)):
        if candidate and Path(candidate).is_file():
            return Path(candidate).resolve()
    raise ServiceError(f"{packaged} not found (run from a convlog checkout, or set CONVLOG_SERVICES_KAFKA_POM)")


def kafka_classpath(cache_dir: Path, settings: Settings | None = None) -> str:
    """The broker classpath (``:``-joined jars), resolved with Maven once and cached in ``cache_dir``
    (pom and Kafka version from ``settings``, without them the environment's)."""
    settings = settings or Settings.from_env()
    return _classpath(cache_dir, kafka_pom(settings), settings.services_kafka_version or "")


@functools.cache
def _classpath(cache_dir: Path, pom: Path, version: str) -> str:
    key = hashlib.sha256(pom.read_bytes() + version.encode()).hexdigest()[:12]
    cached = cache_dir / f"kafka-classpath-{key}.txt"
    if cached.is_file():
        classpath = cached.read_text().strip()
        if classpath and all(Path(jar).is_file() for jar in classpath.split(os.pathsep)):
            return classpath
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceError("Maven (mvn) is not on PATH; it is needed once to fetch the Kafka jars")
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}.tmp")
    argv = [mvn, "-q", "-B", "-f", str(pom), "dependency:build-classpath", f"-Dmdep.outputFile={tmp}"]
    if version:
        argv.append(f"-Dkafka.version={version}")
    progress(f"resolving the Kafka broker classpath with Maven ({pom}); the first run downloads ~60 MB into ~/.m2 ...")
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode != 0 or not tmp.is_file():
        raise ServiceError(f"Maven failed ({' '.join(argv)}):\n{(result.stdout + result.stderr)[-4000:]}")
    tmp.replace(cached)
    progress(f"Kafka classpath ready in {time.monotonic() - started:.1f}s")
    return cached.read_text().strip()


def java_executable(settings: Settings | None = None) -> str:
    home = (settings or Settings.from_env()).java_home
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise ServiceError("java not found (Kafka 4.x brokers need Java 17+)")
    return java


# ---------------------------------------------------------------- the broker

_LOG4J2 = """\
status = warn
shutdownHook = disable
appender.file.type = RollingFile
appender.file.name = FILE
appender.file.fileName = {logs}/server.log
appender.file.filePattern = {logs}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 50MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = info
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = warn
"""


def _cluster_id() -> str:
    """A random Kafka Uuid in its base64 form (as ``StorageTool random-uuid`` prints)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class KafkaHandle(StoppedOnExit):
    """A local broker living in ``data_dir``; the handle can (re)start, stop and kill it."""

    min_heap = "128m"  # -Xms; the cluster's nodes (three JVMs on a small machine) start smaller

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int = 19092,
        controller_port: int = 19093,
        heap: str = "512m",
        classpath_cache: Path | None = None,
        settings: Settings | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env()  # classpath, JVM (CONVLOG_SERVICES_KAFKA_*, JAVA_HOME)
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.controller_port = controller_port
        self.heap = heap
        self.classpath_cache = classpath_cache or services_root(self.settings) / "cache"
        self.pid_file = self.data_dir / "kafka.pid"
        self.log_path = self.data_dir / "logs" / "server.log"
        self.out_path = self.data_dir / "logs" / "kafka.out"

    @property
    def bootstrap(self) -> str:
        """host:port for Kafka clients."""
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        """Pid of the running broker JVM, None if it does not run."""
        pid = read_pid(self.pid_file)
        if pid is None or not pid_alive(pid) or str(self.data_dir / "server.properties") not in cmdline(pid):
            return None
        return pid

    @property
    def running(self) -> bool:
        return self.pid is not None

    def _prepare(self) -> list[str]:
        state_file = self.data_dir / "convlog-kafka.json"
        state = json.loads(state_file.read_text()) if state_file.is_file() else {}
        kraft = self.data_dir / "kraft-logs"
        formatted = (kraft / "meta.properties").is_file()
        if formatted and state.get("controller_port", self.controller_port) != self.controller_port:
            raise ServiceError(
                f"{self.data_dir} was formatted for controller port {state['controller_port']}, "
                f"not {self.controller_port}; use that port or delete the directory"
            )
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        props = self.data_dir / "server.properties"
        props.write_text(self._server_properties(kraft))
        log4j = self.data_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2.format(logs=logs))
        classpath = kafka_classpath(self.classpath_cache, self.settings)
        java = [
            java_executable(self.settings),
            "-cp",
            classpath,
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={logs}",
            "-Djava.awt.headless=true",
        ]
        if not formatted:
            state = self._format_storage(java, props, state)
        state["port"] = self.port
        state_file.write_text(json.dumps(state))
        extra = (self.settings.services_kafka_jvm_opts or "").split()
        return [
            *java,
            f"-Xms{self.min_heap}",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            *extra,
            "kafka.Kafka",
            str(props),
        ]

    def _server_properties(self, kraft: Path) -> str:
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.bootstrap.servers={HOST}:{self.controller_port}",
                f"listeners=PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                f"log.dirs={kraft}",
                "num.partitions=12",
                "default.replication.factor=1",
                "min.insync.replicas=1",
                "offsets.topic.replication.factor=1",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                # After a kill -9 the restarted broker cannot register until its old session
                # expires (default 9 s): keep that short for a single local node.
                "broker.heartbeat.interval.ms=500",
                "broker.session.timeout.ms=3000",
                "auto.create.topics.enable=false",
                "",
            ]
        )

    def _format_storage(self, java: list[str], props: Path, state: dict[str, Any]) -> dict[str, Any]:
        """Format the KRaft storage (first start): a new cluster id unless the state file has one."""
        cluster_id = state.get("cluster_id") or _cluster_id()
        argv = [
            *java,
            "-Xmx256m",
            "kafka.tools.StorageTool",
            "format",
            "--standalone",
            "-t",
            cluster_id,
            "-c",
            str(props),
        ]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
        if result.returncode != 0:
            raise ServiceError(f"kafka storage format failed:\n{result.stdout}{result.stderr}")
        return {"cluster_id": cluster_id, "controller_port": self.controller_port}

    def start(self, *, timeout: float = 120.0, wait: bool = True) -> KafkaHandle:
        """Start the broker unless it runs; with ``wait``, return once it answers metadata requests."""
        if not self.running:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            ensure_port_free(self.port, "Kafka")
            ensure_port_free(self.controller_port, "Kafka controller")
            argv = self._prepare()
            self.pid_file.write_text(f"{spawn_detached(argv, self.out_path, cwd=self.data_dir)}\n")
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Until our broker answers metadata requests; another cluster's broker on the port is refused."""
        deadline = time.monotonic() + timeout
        error: Exception | None = None
        while time.monotonic() < deadline:
            if not self.running:
                raise ServiceError(f"Kafka exited during start-up; {self.log_path}:\n{self.log_tail()}")
            try:
                metadata = cluster_metadata(HOST, self.port, timeout=2.0)
                self.ensure_ours(metadata)
                if metadata.brokers:
                    return
            except (OSError, struct.error) as exc:
                error = exc
            except PortTakenError:
                raise
            except ServiceError as exc:
                error = exc
            time.sleep(0.2)
        raise ServiceError(
            f"Kafka not ready on {self.bootstrap} after {timeout:.0f}s ({error}); {self.log_path}:\n{self.log_tail()}"
        )

    def expected_cluster_id(self) -> str | None:
        """The cluster id this data dir was formatted with (None before the first format)."""
        state_file = self.data_dir / "convlog-kafka.json"
        with contextlib.suppress(OSError, ValueError):
            state = json.loads(state_file.read_text())
            if isinstance(state, dict) and isinstance(state.get("cluster_id"), str):
                return str(state["cluster_id"])
        return None

    def ensure_ours(self, metadata: ClusterMetadata) -> None:
        """Refuse a broker of another cluster on our port (taken between our check and our bind):
        stop our broker, which cannot bind the port anyway, and raise :class:`PortTakenError`."""
        expected = self.expected_cluster_id()
        if expected is None or metadata.cluster_id == expected:
            return
        self.kill()
        raise PortTakenError(
            f"{self.bootstrap} is served by a broker of another Kafka cluster ({metadata.cluster_id}), "
            f"not the one of {self.data_dir} ({expected}); refusing to use it"
        )

    def stop(self, timeout: float = 30.0) -> bool:
        """Controlled shutdown (SIGTERM); SIGKILL after ``timeout`` s. True if it stopped by itself."""
        pid = self.pid
        graceful = True if pid is None else stop_process(pid, signal.SIGTERM, timeout)
        self.pid_file.unlink(missing_ok=True)
        return graceful

    def kill(self) -> None:
        """SIGKILL the broker (a crash: no controlled shutdown, no flush)."""
        pid = self.pid
        if pid is not None:
            kill_tree(process_tree(pid))
        self.pid_file.unlink(missing_ok=True)

    def log_tail(self, lines: int = 30) -> str:
        """Recent ERROR lines and the tail of the broker log, then the tail of its stdout/stderr."""
        errors = [line for line in tail(self.log_path, 2000).splitlines() if " ERROR " in line or "Exception:" in line]
        return (
            f"--- errors:\n{chr(10).join(errors[-8:])}\n--- {self.log_path}:\n{tail(self.log_path, lines)}"
            f"\n--- {self.out_path}:\n{tail(self.out_path, 10)}"
        )

    def __repr__(self) -> str:
        return f"KafkaHandle({str(self.data_dir)!r}, bootstrap={self.bootstrap!r}, pid={self.pid})"


def start_kafka(
    data_dir: Path,
    *,
    port: int,
    controller_port: int,
    timeout: float = 120.0,
    wait: bool = True,
    heap: str = "512m",
) -> KafkaHandle:
    """Start (formatting on first use) a broker in ``data_dir`` on 127.0.0.1:``port``."""
    return KafkaHandle(data_dir, port=port, controller_port=controller_port, heap=heap).start(
        timeout=timeout, wait=wait
    )
