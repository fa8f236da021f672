"""``convlog retention``: exactly the idle conversations are archived, then erased (through the
log, with the reason recorded); a dry run changes nothing; no archive, no erasure. And
``convlog serve`` runs it by itself when ``CONVLOG_RETENTION_IDLE_DAYS`` is set."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from convlog.jobs import retention
from convlog.jobs.retention import active_since
from convlog.runtime.serve import running_service
from convlog.settings import Settings
from events.embedded_log import EmbeddedEventLog
from events.event_types import ConversationErased
from events.keys import ConversationKey
from events.log import EventLog
from events.producer import ConversationProducer
from events.reading import conversation_events
from projectors.window import WindowPolicy
from query_api.as_of import context_inputs_as_of
from query_api.events_json import events_json
from tests.kafka.ops_support import Ops
from tests.projection_support import project_all, temporary_database

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

NOW = datetime.now(UTC)
OLD = NOW - timedelta(days=40)
IDLE_1 = ConversationKey("acme", "alice", "idle-1")
IDLE_2 = ConversationKey("globex", "bob", "idle-2")
RECENT = ConversationKey("acme", "alice", "recent")
REVIVED = ConversationKey("acme", "carol", "old-but-revived")
ALREADY_ERASED = ConversationKey("acme", "dave", "erased-long-ago")


async def _history(log: EventLog) -> None:
    old = ConversationProducer(log, producer="retention-test", clock=lambda: OLD)
    new = ConversationProducer(log, producer="retention-test")
    for key in (IDLE_1, IDLE_2, REVIVED, ALREADY_ERASED):
        await old.append_user(key, f"old question of {key.conversation_id}")
        await old.append_assistant(key, "old answer", finish_reason="stop")
    await old.erase(ALREADY_ERASED, reason="user asked")
    await new.append_user(REVIVED, "back after 40 days")
    await new.append_user(RECENT, "hello today")


async def _erasures(log: EventLog, key: ConversationKey) -> list[str | None]:
    return [e.body.reason async for _, e in conversation_events(log, key) if isinstance(e.body, ConversationErased)]


async def test_retention_archives_then_erases_exactly_the_idle_conversations(ops: Ops, tmp_path: Path) -> None:
    await _history(ops.log)
    await project_all(ops.log, ops.projection.store())
    ends = await ops.log.end_offsets()

    dry = ops.run("retention", "--idle-days", "30", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert sorted(line.split()[2] for line in dry.stdout.splitlines() if line.startswith("would erase")) == sorted(
        [str(IDLE_1), str(IDLE_2)]
    )
    assert "nothing changed" in dry.stdout
    assert await ops.log.end_offsets() == ends  # no event appended
    assert not (tmp_path / "retention").exists()  # no archive written

    # The archive cannot be written: nothing is erased.
    broken = ops.run("retention", "--idle-days", "30", "--archive", str(tmp_path / "no-such-dir" / "a.jsonl"))
    assert broken.returncode == 2
    assert "nothing was erased" in broken.stderr
    assert await ops.log.end_offsets() == ends

    archive_dir = tmp_path / "archives"
    archive_dir.mkdir()
    result = ops.run("retention", "--idle-days", "30", "--archive", str(archive_dir))
    assert result.returncode == 0, result.stderr
    [archive] = list(archive_dir.iterdir())
    assert archive.suffix == ".jsonl"
    manifest, *messages = [json.loads(line) for line in archive.read_text().splitlines()]
    assert sorted(manifest["conversations"]) == sorted([str(IDLE_1), str(IDLE_2)])
    assert manifest["archive"]["idle_days"] == 30
    # What an auditor can still read: the content, with the coordinates of its events.
    assert sorted((m["conversation_key"], m["content"]) for m in messages) == sorted(
        [
            (str(IDLE_1), "old question of idle-1"),
            (str(IDLE_1), "old answer"),
            (str(IDLE_2), "old question of idle-2"),
            (str(IDLE_2), "old answer"),
        ]
    )
    assert all(isinstance(m["coordinates"]["offset"], int) for m in messages)

    for key in (IDLE_1, IDLE_2):  # erased through the log, the reason in the event
        [reason] = await _erasures(ops.log, key)
        assert reason is not None
        assert "idle for more than 30 days" in reason
        assert archive.name in reason
    for key in (RECENT, REVIVED):
        assert await _erasures(ops.log, key) == []
    assert await _erasures(ops.log, ALREADY_ERASED) == ["user asked"]

    await project_all(ops.log, ops.projection.store())
    erased = await ops.projection.rows(
        "SELECT conversation_key FROM {s}.conversations WHERE erased_at > %s ORDER BY 1", NOW - timedelta(minutes=10)
    )
    assert erased == sorted([(str(IDLE_1),), (str(IDLE_2),)])
    left = await ops.projection.rows(
        "SELECT count(*) FROM {s}.transcript WHERE content IS NOT NULL AND conversation_key = ANY(%s)",
        [str(IDLE_1), str(IDLE_2)],
    )
    assert left == [(0,)]

    again = ops.run("retention", "--idle-days", "30", "--archive", str(archive_dir))
    assert again.returncode == 0, again.stderr
    assert "no conversation idle" in again.stdout
    assert len(list(archive_dir.iterdir())) == 1


async def test_retention_waits_for_the_projection_and_says_so_when_it_lags(ops: Ops) -> None:
    await _history(ops.log)  # never projected: idle cannot be told from the read models
    ends = await ops.log.end_offsets()
    result = ops.run("retention", "--idle-days", "30", "--wait", "1")
    assert result.returncode == 75  # retriable
    assert "behind the log" in result.stderr
    assert await ops.log.end_offsets() == ends


async def test_serve_runs_retention_when_configured(pg_admin_url: str, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, partitions=4)  # the embedded log: history is written first
    log = EmbeddedEventLog.open(settings.embedded_log_path, partitions=4)
    try:
        await _history(log)
    finally:
        await log.close()
    async with temporary_database(pg_admin_url) as url:
        settings = Settings(
            database_url=url, data_dir=tmp_path, partitions=4, retention_idle_days=30, retention_first_run_s=0
        )
        async with running_service(settings) as service:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                async with service.pool.connection() as conn:
                    cur = await conn.execute(
                        "SELECT conversation_key FROM convlog_read_models_v1.conversations "
                        "WHERE erased_at > %s ORDER BY 1",
                        [NOW - timedelta(minutes=10)],
                    )
                    erased = await cur.fetchall()
                if len(erased) == 2:
                    break
                await asyncio.sleep(0.3)
            assert erased == sorted([(str(IDLE_1),), (str(IDLE_2),)])
    assert len(list((tmp_path / "retention").iterdir())) == 1


async def test_a_conversation_written_to_during_the_run_is_not_erased(ops: Ops) -> None:
    await _history(ops.log)
    started_at = await ops.log.end_offsets()
    await ops.producer.append_user(IDLE_1, "I am back")  # arrives while retention archives
    await ops.producer.append_user(RECENT, "unrelated")
    woke = await active_since(ops.log, started_at, {str(IDLE_1), str(IDLE_2)})
    assert woke == {str(IDLE_1)}
    assert await active_since(ops.log, await ops.log.end_offsets(), {str(IDLE_1)}) == set()


async def test_a_conversation_written_to_after_the_last_check_keeps_everything(
    ops: Ops, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the conditional erase closes: the user comes back after retention's last check
    and before its erase event lands. The erase is void; nothing of the conversation is lost."""
    await _history(ops.log)
    await project_all(ops.log, ops.projection.store())
    real_check = retention.active_since

    async def check_then_user_returns(*args: Any, **kwargs: Any) -> set[str]:
        woke = await real_check(*args, **kwargs)
        await ops.producer.append_user(IDLE_1, "I am back, just now")  # after the check
        return woke

    monkeypatch.setattr(retention, "active_since", check_then_user_returns)
    report = await retention.run_retention(
        ops.projection.pool,
        ops.projection.version.schema,
        ops.log,
        ops.producer,
        idle_days=30,
        archive=tmp_path,
        dry_run=False,
        progress=False,
    )
    assert report.erased == 2  # both erase events were appended ...
    await project_all(ops.log, ops.projection.store())
    rows = await ops.projection.rows(
        "SELECT content, erased_at FROM {s}.transcript WHERE conversation_key = %s ORDER BY seq", str(IDLE_1)
    )
    # ... but IDLE_1's was void: its history and the new message are all there
    assert rows == [("old question of idle-1", None), ("old answer", None), ("I am back, just now", None)]
    [(erased_at,)] = await ops.projection.rows(
        "SELECT erased_at FROM {s}.conversations WHERE conversation_key = %s", str(IDLE_1)
    )
    assert erased_at is None
    assert await ops.projection.rows(
        "SELECT count(*) FROM {s}.transcript WHERE conversation_key = %s AND content IS NOT NULL", str(IDLE_2)
    ) == [(0,)]
    # as_of and the events endpoint agree: a void erase withholds nothing, not even from the past
    pairs = [pair async for pair in conversation_events(ops.log, IDLE_1)]
    first_answer = pairs[1][0].offset
    inputs = await context_inputs_as_of(
        ops.log, IDLE_1, first_answer, encoding="o200k_base", policy=WindowPolicy(), max_event_bytes=1 << 20
    )
    assert inputs is not None
    assert [m.content for m in inputs.messages] == ["old question of idle-1", "old answer"]
    listed = events_json(pairs)
    assert [e["body"].get("content") for e in listed if e["event_type"] == "MessageAppended"] == [
        "old question of idle-1",
        "old answer",
        "I am back, just now",
    ]
    gone = [pair async for pair in conversation_events(ops.log, IDLE_2)]
    assert {e["body"].get("content") for e in events_json(gone) if e["event_type"] == "MessageAppended"} == {
        "[withheld]"
    }
