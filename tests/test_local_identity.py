"""A local service is the one of its data dir, or it is not used (issue 32).

Between "the port is free" and the server's bind another process can take the port. Each test
here makes that race happen on purpose — the free-port check is told to say "free" while a
foreign server (another Postgres, a plain listener, another Kafka cluster's broker) holds the
port — and checks that convlog refuses the foreign server or moves to another port, and never
connects its data to someone else's database.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from convlog.embedded import postgres as embedded_pg
from convlog.embedded import postgres_server as postgres_service
from convlog.embedded.postgres import ensure_embedded_postgres, stop_embedded_postgres
from convlog.embedded.postgres_server import PostgresHandle, start_postgres
from convlog.embedded.processes import PortTakenError, ServiceError, port_in_use
from devservices import kafka_service
from devservices.kafka_service import KafkaHandle
from tests.support import free_port
from tests.test_pg import require_pg_binaries

REPO_ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def foreign_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresHandle]:
    """Somebody else's Postgres (same trust-auth user, so it would happily serve us)."""
    require_pg_binaries()
    handle = start_postgres(tmp_path_factory.mktemp("foreign"), port=free_port())
    yield handle
    handle.stop()


@pytest.fixture
def race(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check before the start finds the port free: another process takes it right after."""
    monkeypatch.setattr(postgres_service, "ensure_port_free", lambda port, what: None)
    monkeypatch.setattr(kafka_service, "ensure_port_free", lambda port, what: None)
    monkeypatch.setattr(embedded_pg, "port_in_use", lambda port: False)


def _data_directory(url: str) -> str:
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    assert row is not None
    return os.path.realpath(str(row[0]))


@pytest.mark.usefixtures("race")
def test_a_foreign_postgres_on_the_port_is_refused_not_used(foreign_postgres: PostgresHandle, tmp_path: Path) -> None:
    ours = PostgresHandle(tmp_path / "ours", port=foreign_postgres.port)
    with pytest.raises(PortTakenError) as raised:
        ours.start(timeout=60)
    message = str(raised.value)
    assert f"127.0.0.1:{foreign_postgres.port}" in message
    assert str(foreign_postgres.pgdata) in message, "the error names the other server's data directory"
    assert not ours.running, "our server was stopped, not left behind"
    assert _data_directory(foreign_postgres.url) == str(foreign_postgres.pgdata)


@pytest.mark.usefixtures("race")
def test_a_plain_listener_on_the_port_is_refused_when_our_server_cannot_bind(tmp_path: Path) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = int(listener.getsockname()[1])
        ours = PostgresHandle(tmp_path / "ours", port=port)
        began = time.monotonic()
        with pytest.raises(PortTakenError, match=f"could not bind 127.0.0.1:{port}"):
            ours.start(timeout=60)
        assert time.monotonic() - began < 30, "refused as soon as our server gave up, not at the time-out"
    assert not ours.running


@pytest.mark.usefixtures("race")
def test_the_embedded_postgres_moves_to_another_port_and_records_it(
    foreign_postgres: PostgresHandle, tmp_path: Path
) -> None:
    root = tmp_path / "data" / "postgres"
    root.mkdir(parents=True)
    (root / "port").write_text(f"{foreign_postgres.port}\n")  # remembered, then taken by another server
    try:
        url = ensure_embedded_postgres(tmp_path / "data")
        port = int((root / "port").read_text())
        assert port != foreign_postgres.port
        assert f":{port}/" in url
        assert _data_directory(url) == str((root / "pgdata").resolve())
        assert ensure_embedded_postgres(tmp_path / "data") == url, "the next start finds it on the recorded port"
    finally:
        stop_embedded_postgres(tmp_path / "data")


def test_readiness_fails_fast_when_our_server_dies_after_binding(tmp_path: Path) -> None:
    require_pg_binaries()
    handle = PostgresHandle(tmp_path / "pg", port=free_port())
    handle.start(timeout=60)  # initdb once, so the next start is only the server's
    handle.stop()
    handle.start(wait=False)
    try:
        deadline = time.monotonic() + 30
        while not (port_in_use(handle.port) and handle.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = handle.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        began = time.monotonic()
        with pytest.raises(ServiceError, match="not running"):
            handle.wait_ready(timeout=60)
        assert time.monotonic() - began < 5
    finally:
        handle.kill()


def test_two_embedded_postgres_started_at_once_on_one_port_each_get_their_own(tmp_path: Path) -> None:
    """Two `make demo`s in two clones at once: both remembered the same port; both must work."""
    require_pg_binaries()
    port = free_port()
    dirs = [tmp_path / "one", tmp_path / "two"]
    for data_dir in dirs:
        (data_dir / "postgres").mkdir(parents=True)
        (data_dir / "postgres" / "port").write_text(f"{port}\n")
    code = (
        "import sys, pathlib; from convlog.embedded.postgres import ensure_embedded_postgres as e; "
        "print(e(pathlib.Path(sys.argv[1])))"
    )
    starters = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(d)],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for d in dirs
    ]
    try:
        urls = []
        for starter in starters:
            out, err = starter.communicate(timeout=240)
            assert starter.returncode == 0, err
            urls.append(out.strip().splitlines()[-1])
        assert urls[0] != urls[1]
        for data_dir, url in zip(dirs, urls, strict=True):
            assert _data_directory(url) == str((data_dir / "postgres" / "pgdata").resolve())
    finally:
        for data_dir in dirs:
            stop_embedded_postgres(data_dir)


@pytest.mark.kafka
@pytest.mark.usefixtures("race")
def test_a_broker_of_another_cluster_on_the_port_is_refused_not_used(kafka_bootstrap: str, tmp_path: Path) -> None:
    port = int(kafka_bootstrap.split(",", maxsplit=1)[0].rsplit(":", 1)[1])  # the shared broker: not this data dir's
    ours = KafkaHandle(tmp_path / "kafka", port=port, controller_port=free_port(), heap="256m")
    try:
        with pytest.raises(PortTakenError, match="another Kafka cluster"):
            ours.start(timeout=120)
        assert not ours.running, "our broker was stopped, not left behind"
    finally:
        ours.kill()
