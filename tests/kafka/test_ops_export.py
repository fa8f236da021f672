"""``convlog export``: the audit export, its filters and coordinates, and its memory bound on
100,000 messages (peak RSS of the export process measured, not assumed)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from events.keys import ConversationKey
from events.producer import ConversationProducer
from tests.kafka.ops_support import REPO, Ops
from tests.projection_support import project_all

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

T0 = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)


def _clock(times: list[datetime]) -> Callable[[], datetime]:
    return lambda: times[0]


def _lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line]


async def test_export_writes_one_line_per_message_with_coordinates_and_honours_the_filters(
    ops: Ops, tmp_path: Path
) -> None:
    now = [T0]
    producer = ConversationProducer(ops.log, producer="export-test", clock=_clock(now))
    alice, bob = ConversationKey("acme", "alice", "c1"), ConversationKey("acme", "bob", "c2")
    appended = {}
    for day in range(3):
        now[0] = T0 + timedelta(days=day)
        appended[("alice", day)] = await producer.append_user(alice, f"alice day {day}")
        appended[("bob", day)] = await producer.append_user(bob, f"bob day {day}")
    await producer.append_user(ConversationKey("globex", "alice", "c1"), "another tenant's")
    now[0] = T0 + timedelta(days=3)
    await producer.redact(alice, appended[("alice", 0)].message_id or "", reason="pii")
    await project_all(ops.log, ops.projection.store())

    result = ops.run("export", "--tenant", "acme", "--format", "jsonl")
    assert result.returncode == 0, result.stderr
    lines = _lines(result.stdout)
    assert len(lines) == 6  # the other tenant's message is not there
    assert "exported 6 message(s)" in result.stderr
    first = next(line for line in lines if line["event_id"] == appended[("alice", 0)].event_id)
    assert first["coordinates"] == {
        "partition": appended[("alice", 0)].partition,
        "offset": appended[("alice", 0)].offset,
    }
    assert first["content"] is None  # redacted: the audit keeps that it existed, and why
    assert first["redaction_reason"] == "pii"
    assert first["conversation_key"] == "acme:alice:c1"
    for line in lines:  # every line points at the log record it came from
        key = ("alice" if line["user_id"] == "alice" else "bob", int(str(line["content"] or "x 0").split()[-1]))
        if line["content"] is not None:
            assert line["coordinates"] == {"partition": appended[key].partition, "offset": appended[key].offset}

    out = tmp_path / "bob.jsonl"
    since, until = (T0 + timedelta(days=1)).isoformat(), (T0 + timedelta(days=2)).isoformat()
    filtered = ops.run(
        "export",
        "--tenant",
        "acme",
        "--user",
        "bob",
        "--since",
        since,
        "--until",
        until,
        "--format",
        "jsonl",
        "--output",
        str(out),
    )
    assert filtered.returncode == 0, filtered.stderr
    assert filtered.stdout == ""
    assert [line["content"] for line in _lines(out.read_text())] == ["bob day 1"]  # since inclusive, until exclusive
    assert [p.name for p in tmp_path.iterdir()] == ["bob.jsonl"]  # written as .partial, renamed when complete

    bad = ops.run("export", "--tenant", "acme", "--since", "yesterday", "--format", "jsonl")
    assert bad.returncode == 2
    assert "not an ISO 8601 timestamp" in bad.stderr
    assert ops.run("export", "--tenant", "acme").returncode == 2  # --format is required
    unwritable = ops.run("export", "--tenant", "acme", "--format", "jsonl", "-o", str(tmp_path / "no" / "such.jsonl"))
    assert unwritable.returncode == 2
    assert "cannot write" in unwritable.stderr


def _export_peak_rss(ops: Ops, out: Path, *args: str) -> tuple[int, int, float]:
    """(exit code, peak RSS in MiB, seconds) of one export process, measured with wait4."""
    started = time.monotonic()
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "convlog.cli.main", "export", "--format", "jsonl", *args],
            cwd=REPO,
            env=ops.env,
            stdout=sink,
            stderr=subprocess.DEVNULL,
        )
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss // 1024, time.monotonic() - started  # ru_maxrss is in KiB on Linux


@pytest.mark.slow
async def test_export_of_100_000_messages_runs_in_bounded_memory(ops: Ops, tmp_path: Path) -> None:
    conversations, per_conversation = 200, 500
    text = "an audit line with some words in it to make the export realistic " * 2

    started = time.monotonic()

    async def conversation(c: int) -> None:
        key = ConversationKey("acme", f"user-{c % 20}", f"conv-{c}")
        for i in range(per_conversation):  # one writer per conversation, 200 in flight: the broker batches them
            await ops.producer.append_user(key, f"{text}{c}.{i}")

    await asyncio.gather(*(conversation(c) for c in range(conversations)))
    produced = time.monotonic() - started
    await project_all(ops.log, ops.projection.store(), batch_size=5000)
    projected = time.monotonic() - started - produced
    total = conversations * per_conversation
    assert await ops.projection.rows("SELECT count(*) FROM {s}.transcript") == [(total,)]

    small_code, small_rss, _ = _export_peak_rss(
        ops, tmp_path / "small.jsonl", "--tenant", "acme", "--user", "user-0", "--until", "2000-01-01"
    )  # nothing: the process's baseline
    code, rss, seconds = _export_peak_rss(ops, tmp_path / "all.jsonl", "--tenant", "acme")
    assert (small_code, code) == (0, 0)
    size_mib = (tmp_path / "all.jsonl").stat().st_size / 2**20
    with (tmp_path / "all.jsonl").open() as exported:
        assert sum(1 for _ in exported) == total
    print(
        f"\nproduced {total} in {produced:.1f}s, projected in {projected:.1f}s; export of {size_mib:.0f} MiB in "
        f"{seconds:.1f}s: peak RSS {rss} MiB (an empty export: {small_rss} MiB)"
    )
    # Constant memory: the full export needs at most a little more than an empty one, and far
    # less than the output it wrote (a fetchall of 100,000 rows alone would be hundreds of MiB).
    assert rss - small_rss < 40
    assert rss < size_mib + small_rss
