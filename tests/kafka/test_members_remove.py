"""``convlog members list|remove``: a static member stopped for good gives its partitions back at once,
instead of after the session timeout — what a scale-down needs (a restart keeps them, on purpose)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from convlog.ops.groups import list_members, remove_members
from convlog.settings import Settings
from events.errors import ConfigurationError
from events.kafka_groups import GroupState
from tests.cluster.group_members import REPO, Member, start_member
from tests.projection_support import Projection
from tests.support import unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

CLI = [sys.executable, "-m", "convlog.cli.main", "members"]
SESSION_TIMEOUT_S = 20  # long, so that a partition moving sooner was moved by the removal


def _env(projection: Projection, bootstrap: str, topic: str, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CONVLOG_KAFKA_BOOTSTRAP": bootstrap,
        "CONVLOG_DATABASE_URL": projection.url,
        "CONVLOG_TOPIC": topic,
        "CONVLOG_PARTITIONS": "4",
        "CONVLOG_DATA_DIR": str(tmp_path),
        "CONVLOG_KAFKA_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_S * 1000),
    }


async def _until(condition: Callable[[], object], members: list[Member], what: str, timeout_s: float) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            pytest.fail(f"timed out waiting for {what}\n" + "\n".join(m.tail() for m in members))
        await asyncio.sleep(0.1)
    return time.monotonic() - started


async def _until_members(settings: Settings, instance_ids: set[str]) -> GroupState:
    """The group once it is stable with exactly these members, each assigned partitions."""
    deadline = time.monotonic() + 30
    while True:
        state = await list_members(settings, "projector")
        if (
            state.state == "Stable"
            and {m.instance_id for m in state.members} == instance_ids
            and all(m.partitions for m in state.members)
        ):
            return state
        assert time.monotonic() < deadline, state
        await asyncio.sleep(0.2)


async def test_a_removed_static_member_gives_its_partitions_back_at_once(
    projection: Projection, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = unique_topic("members")
    env = _env(projection, kafka_bootstrap, topic, tmp_path)
    staying = start_member("staying", env, tmp_path, instance_id="projector-a")
    leaving = start_member("leaving", env, tmp_path, instance_id="projector-b")
    members = [staying, leaving]
    try:
        await _until(
            lambda: staying.owned() and leaving.owned() and len(staying.owned() | leaving.owned()) == 4,
            members,
            "both members to own partitions",
            60,
        )
        settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url=projection.url, topic=topic)
        listed = await _until_members(settings, {"projector-a", "projector-b"})
        owned = {m.instance_id: set(m.partitions) for m in listed.members}
        assert owned == {"projector-a": set(staying.owned()), "projector-b": set(leaving.owned())}
        shown = await asyncio.to_thread(
            subprocess.run, [*CLI, "list", "projector"], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert shown.returncode == 0, shown
        assert "Stable, 2 member(s)" in shown.stdout, shown.stdout
        assert "projector-b" in shown.stdout, shown.stdout
        leaving.stop()  # SIGTERM: a static member does not leave its group; its partitions wait
        await asyncio.sleep(1)
        assert len(staying.owned()) < 4
        command = [*CLI, "remove", "projector", "projector-b", "nobody"]
        done = await asyncio.to_thread(subprocess.run, command, cwd=REPO, env=env, capture_output=True, text=True)
        assert done.returncode == 1, done  # one of the two was not a member
        assert "projector-b: removed" in done.stdout, done.stdout
        assert "nobody: not a member" in done.stdout, done.stdout
        moved_s = await _until(lambda: len(staying.owned()) == 4, members, "the staying member to own everything", 15)
        print(
            f"the removed member's partitions moved {moved_s:.2f} s after the command (session timeout "
            f"{SESSION_TIMEOUT_S} s)"
        )
        assert moved_s < SESSION_TIMEOUT_S / 2
        assert [m.instance_id for m in (await list_members(settings, "projector")).members] == ["projector-a"]
        again = await remove_members(settings, "projector", ["projector-b"])
        assert again.outcome == {"projector-b": "UnknownMemberIdError"}  # gone already
        assert not again.all_removed
    finally:
        for m in members:
            m.stop()


async def test_members_remove_refuses_what_it_cannot_do(projection: Projection) -> None:
    with pytest.raises(ConfigurationError, match="CONVLOG_KAFKA_BOOTSTRAP"):
        await remove_members(Settings(database_url=projection.url), "projector", ["a"])
    with pytest.raises(ConfigurationError, match="non-empty"):
        await remove_members(Settings(database_url=projection.url, kafka_bootstrap="127.0.0.1:1"), "projector", [" "])
