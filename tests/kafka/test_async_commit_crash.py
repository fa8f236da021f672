"""Projection transactions commit with ``synchronous_commit = off``: Postgres and the projector
are both killed with SIGKILL mid-stream, again and again, so that commits the projector saw
acknowledged are lost; after each restart the projector re-applies that tail from the log, and
at the end ``convlog verify --all`` finds the tables equal to a clean rebuild, every event
applied exactly once."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from convlog.embedded.postgres_server import PostgresHandle
from devservices.cli import start_postgres
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from events.producer import ConversationProducer
from tests.support import free_port, unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CONVERSATIONS = 200
ROUNDS = 4


@pytest.fixture
def slow_wal_postgres(pg_admin_url: str) -> Iterator[PostgresHandle]:
    # Not under tmp_path: every pytest session that starts (another engineer's, on a shared
    # machine) makes /tmp/pytest-of-<user> 0700 again, and the server, running as its own OS
    # user, then loses its data directory mid-test.
    data_dir = Path(tempfile.mkdtemp(prefix="convlog-async-commit-"))
    handle = start_postgres(data_dir / "pg", port=free_port())
    # Widen the window an asynchronous commit stays unwritten (in Postgres' WAL buffers, which a
    # SIGKILL loses; WAL written to the kernel survives a killed process): the WAL writer then
    # writes only every 10 s, so a kill loses the last commits nearly every time.
    with psycopg.connect(handle.url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
        conn.execute("ALTER SYSTEM SET wal_writer_flush_after = '1GB'")
        conn.execute("SELECT pg_reload_conf()")
    yield handle
    handle.kill()
    shutil.rmtree(data_dir, ignore_errors=True)


def _start_projector(env: dict[str, str], log_file: Path) -> subprocess.Popen[bytes]:
    with log_file.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "convlog.cli.main", "project"], cwd=REPO, env=env, stdout=out, stderr=out
        )


async def _produce(producer: ConversationProducer, events: int, rate_per_s: float) -> int:
    started = time.monotonic()
    for i in range(events):
        key = ConversationKey("acme", f"user-{i % 17}", f"conv-{i % CONVERSATIONS}")
        if i % 2 == 0:
            await producer.append_user(key, f"question {i} 你好")
        else:
            await producer.append_assistant(key, f"answer {i}", model="gpt-4o-mini", finish_reason="stop")
        await asyncio.sleep(max(0.0, (i + 1) / rate_per_s - (time.monotonic() - started)))
    return events


def _applied(url: str) -> int:
    """The sum of the live version's positions (0 before the projector made one)."""
    with psycopg.connect(url, connect_timeout=5) as conn:
        if conn.execute("SELECT to_regclass('convlog.projection_versions')").fetchone() == (None,):
            return 0  # not migrated yet
        row = conn.execute("SELECT schema_name FROM convlog.projection_versions WHERE status = 'live'").fetchone()
        if row is None:
            return 0
        positions = conn.execute(f'SELECT coalesce(sum(next_offset), 0) FROM "{row[0]}".positions').fetchone()  # noqa: S608
        return int(positions[0]) if positions else 0


async def test_sigkill_of_postgres_and_projector_loses_only_a_tail_reapplied_from_the_log(
    slow_wal_postgres: PostgresHandle, kafka_bootstrap: str, tmp_path: Path
) -> None:
    url = slow_wal_postgres.url
    topic = unique_topic("asynccommit")
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=4)
    producer = ConversationProducer(log, producer="crash-test")
    env = {
        **os.environ,
        "CONVLOG_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "CONVLOG_DATABASE_URL": url,
        "CONVLOG_TOPIC": topic,
        "CONVLOG_PARTITIONS": "4",
        "CONVLOG_DATA_DIR": str(tmp_path / "data"),
        "CONVLOG_LOG_LEVEL": "warning",
        "CONVLOG_KAFKA_SESSION_TIMEOUT_MS": "6000",
        "CONVLOG_PROJECTOR_INSTANCE_ID": "async-commit-test",  # a restart takes its partitions back at once
    }
    log_file = tmp_path / "projector.log"
    rng = random.Random(11)
    producing = asyncio.create_task(_produce(producer, events=8000, rate_per_s=300))  # ~27 s of writing
    proc = _start_projector(env, log_file)
    losses: list[tuple[int, int]] = []  # (applied as seen before the kill, applied after recovery)
    try:
        for _ in range(ROUNDS):
            before = await asyncio.to_thread(_applied, url)
            deadline = time.monotonic() + 60
            while await asyncio.to_thread(_applied, url) <= before:  # a projector at work
                assert time.monotonic() < deadline, log_file.read_text()[-3000:]
                assert proc.poll() is None, log_file.read_text()[-3000:]
                await asyncio.sleep(0.05)
            await asyncio.sleep(rng.uniform(0.5, 2.0))
            seen = await asyncio.to_thread(_applied, url)  # committed, as far as any reader could tell
            slow_wal_postgres.kill()
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            await asyncio.to_thread(slow_wal_postgres.start)  # crash recovery
            losses.append((seen, await asyncio.to_thread(_applied, url)))
            proc = _start_projector(env, log_file)
        written = await producing
        ends = await log.end_offsets()
        deadline = time.monotonic() + 120
        while await asyncio.to_thread(_applied, url) < sum(ends.values()):
            assert time.monotonic() < deadline, log_file.read_text()[-3000:]
            assert proc.poll() is None, log_file.read_text()[-3000:]
            await asyncio.sleep(0.5)
    finally:
        producing.cancel()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        await log.close()
    # The kills did lose acknowledged commits (what this test is about): positions went back.
    assert any(after < seen for seen, after in losses), losses
    verify = subprocess.run(
        [sys.executable, "-m", "convlog.cli.main", "verify", "--all"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT schema_name FROM convlog.projection_versions WHERE status = 'live'").fetchone()
        assert row is not None
        s = row[0]
        counts = conn.execute(
            f'SELECT (SELECT count(*) FROM "{s}".event_ids), (SELECT count(*) FROM "{s}".transcript), '  # noqa: S608
            f'(SELECT count(DISTINCT event_id) FROM "{s}".transcript), (SELECT count(*) FROM "{s}".dead_letters)'
        ).fetchone()
    assert counts == (written, written, written, 0)  # every acknowledged event exactly once
    print(f"\n(applied seen before the kill, after recovery) per round: {losses}")
