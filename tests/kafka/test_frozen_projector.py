"""A frozen (not dead) projector does not block its partitions' next owner.

Two ``convlog project`` processes share a two-partition topic while a producer appends. The one
owning partition 0 is stopped with SIGSTOP in the middle of a batch's transaction — caught
either idle in it (between statements) or inside a ``COPY`` (Postgres waiting for its data) —,
holding the row locks of its positions. The group hands its partition to the other member after
the session timeout; that member's batches must not wait on the frozen transaction's locks: Postgres
ends an idle transaction (``idle_in_transaction_session_timeout``), the projectors end one frozen
in a COPY (no Postgres timeout interrupts that wait), and a lock wait fails retriably
(``lock_timeout``) instead of lasting until TCP gives up. The frozen process is then resumed: its
batch is refused by the positions fence, nothing is applied twice, ``convlog verify`` is clean.
The frozen member is a ``convlog project``, or a ``convlog serve`` running its projector.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from convlog.settings import Settings
from convlog.wiring import make_producer
from events.kafka_log import KafkaEventLog
from tests.cluster.group_members import REPO, Member, start_member
from tests.cluster.test_projector_group_failover import Appends, Readable, until
from tests.projection_support import Projection
from tests.support import convlog_cli, free_port, unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

SESSION_TIMEOUT_MS = 6_000  # the broker's minimum: the frozen member leaves the group after 6 s
IDLE_IN_TRANSACTION_S = 3.0
LOCK_TIMEOUT_S = 2.0
TAKEOVER_BOUND_S = 20.0

# A session of the process (by its TCP ports) inside a transaction that has written or locked rows
# (FOR UPDATE assigns it a transaction id), waiting on its client: a batch's, frozen.
_FROZEN = """
SELECT pid, CASE WHEN state = 'active' THEN 'copy' ELSE 'idle' END FROM pg_stat_activity
WHERE datname = current_database() AND client_port = ANY(%s) AND backend_xid IS NOT NULL
  AND (state = 'idle in transaction' OR (state = 'active' AND wait_event = 'ClientRead'))
"""


def tcp_ports(pid: int) -> list[int]:
    """The local ports of process ``pid``'s TCP sockets (its fds' socket inodes in /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = str(fd.readlink())
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def start_serve_member(name: str, env: dict[str, str], log_dir: Path) -> Member:
    """``convlog serve`` with its projector (no summarizer) as a member of the group, as
    :func:`start_member` starts ``convlog project``: its sessions are the API's pool's, with no
    limits of their own, so only the other member ends its stalled transaction."""
    log_file = log_dir / f"{name}.log"
    serve_env = {
        **env,
        "CONVLOG_LOG_LEVEL": "info",
        "CONVLOG_HTTP_PORT": str(free_port()),
        "CONVLOG_API_TOKENS": "acme:frozen-test-token",
    }
    with log_file.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "convlog.cli.main", "serve", "--no-summarizer"],
            cwd=REPO,
            env=serve_env,
            stdout=out,
            stderr=out,
        )
    return Member(name, None, process, log_file)


async def freeze_mid_transaction(member: Member, url: str, wanted: str, attempts: int = 400) -> int:
    """SIGSTOP ``member`` until it is caught inside a batch's transaction in state ``wanted``
    (``idle`` or ``copy``); the frozen session's backend pid."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for _ in range(attempts):
            member.process.send_signal(signal.SIGSTOP)
            await asyncio.sleep(0.2)  # what it sent before it stopped has reached Postgres
            rows = await (await conn.execute(_FROZEN, [tcp_ports(member.process.pid)])).fetchall()
            if any(state == wanted for _, state in rows):
                return next(pid for pid, state in rows if state == wanted)
            member.process.send_signal(signal.SIGCONT)
            await asyncio.sleep(random.uniform(0.05, 0.3))
    pytest.fail(f"never caught {member.name} {wanted} in a transaction in {attempts} attempts\n{member.tail()}")


@pytest.mark.parametrize(
    ("frozen_role", "frozen_in"),
    [("project", "idle"), ("project", "copy"), ("serve", "idle")],
    ids=["project-idle-in-transaction", "project-in-a-copy", "serve-idle-in-transaction"],
)
async def test_a_frozen_projector_does_not_block_its_successor(
    frozen_role: str, frozen_in: str, kafka_bootstrap: str, projection: Projection, tmp_path: Path
) -> None:
    topic = unique_topic("frozen")
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic=topic, partitions=2)
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=2)
    env = {
        **settings.subprocess_env(),
        "CONVLOG_DATABASE_URL": projection.url,
        "CONVLOG_DATA_DIR": str(tmp_path),
        "CONVLOG_KAFKA_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
        "CONVLOG_PROJECTOR_IDLE_IN_TRANSACTION_TIMEOUT_S": str(IDLE_IN_TRANSACTION_S),
        "CONVLOG_PROJECTOR_LOCK_TIMEOUT_S": str(LOCK_TIMEOUT_S),
    }
    appends = Appends(make_producer(log, settings, producer="frozen-test"))
    readable = Readable(projection)
    if frozen_role == "serve":
        first = start_serve_member("first", env, tmp_path)
    else:
        first = start_member("first", env, tmp_path, instance_id=None)
    members = [first]
    tasks = [asyncio.create_task(appends.run()), asyncio.create_task(readable.run())]
    try:
        await until(lambda: first.owned() == {0, 1}, 60, "the first member to own both partitions", members)
        second = start_member("second", env, tmp_path, instance_id=None)
        members.append(second)
        await until(lambda: len(first.owned()) == len(second.owned()) == 1, 60, "one partition each", members)
        await asyncio.sleep(1.0)  # both at work
        frozen, successor = first, second
        frozen_partition = next(iter(frozen.owned()))

        await freeze_mid_transaction(frozen, projection.url, frozen_in)
        frozen_at = time.time()
        # An append to the frozen member's partition made after the freeze becomes readable: the
        # successor took the partition over and its batches got through.
        await until(
            lambda: any(a.partition == frozen_partition and a.at > frozen_at for a in appends.acked),
            10,
            "an append to the frozen partition",
            members,
        )
        after = next(a for a in appends.acked if a.partition == frozen_partition and a.at > frozen_at)
        await until(
            lambda: readable.at(frozen_partition, after.offset) is not None,
            TAKEOVER_BOUND_S,
            f"partition {frozen_partition} projected by the successor",
            members,
        )
        takeover_s = time.time() - frozen_at
        assert successor.owned() == {0, 1}

        frozen.process.send_signal(signal.SIGCONT)  # resumed: its transaction is gone, its batch fenced
        await asyncio.sleep(4.0)
        appends.stop.set()
        await tasks[0]
        ends = await log.end_offsets()
        await until(lambda: readable.latest == ends, 60, f"positions to reach the log end {ends}", members)
        frozen_log = frozen.log_file.read_text(errors="replace")
        assert frozen.alive, frozen.tail()  # the ended session was retried, not fatal
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for m in members:
            if m.alive:
                m.process.send_signal(signal.SIGCONT)
            m.stop()
        await log.close()

    frozen.changes()  # its log read to the end: the fence's refusals counted
    print(
        f"frozen {frozen_role} {frozen_in}: partition {frozen_partition} projected again {takeover_s:.1f} s"
        f" after the freeze; the resumed member's batches refused by the fence: {frozen.conflicts}"
    )
    assert "ProjectionError" not in frozen_log, frozen.tail()
    assert frozen.conflicts >= 1, frozen.tail()  # it retried its batch when resumed: the positions fence refused it
    # Every acknowledged event projected exactly once, at its coordinates; nothing dead-lettered.
    rows = await projection.rows('SELECT partition, "offset", event_id FROM {s}.transcript ORDER BY 1, 2')
    assert rows == sorted((a.partition, a.offset, a.event_id) for a in appends.acked)
    assert await projection.rows("SELECT count(*) FROM {s}.dead_letters") == [(0,)]
    assert dict(await projection.rows("SELECT partition, next_offset FROM {s}.positions")) == ends
    verify = convlog_cli(env, "verify", "--all")
    assert verify.returncode == 0, verify.stdout + verify.stderr
