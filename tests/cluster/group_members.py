"""Members of one projector consumer group as a user runs them: ``convlog project`` processes
(the real CLI), each logging to a file of its own, killed with SIGKILL like a crashed machine.

A member's partitions are read from its own structured log (``projector.assigned`` /
``projector.revoked`` lines, JSON at level info): that is what the process itself believes it
owns, with the moment it came to believe it. The log also tells when it began to join the group
(``projector.start``) and how many of its batches the positions fence refused.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Change:
    """One line of a member's log about its partitions: at ``at`` (epoch seconds) it was
    assigned ``partitions`` (``assigned``) or lost them (not ``assigned``)."""

    at: float
    assigned: bool
    partitions: frozenset[int]


@dataclass
class Member:
    name: str
    instance_id: str | None  # static membership's group.instance.id; None: a dynamic member
    process: subprocess.Popen[bytes]
    log_file: Path
    killed_at: float | None = None
    started_at: float | None = None  # when it logged ``projector.start``: about to join the group
    conflicts: int = 0  # batches refused by the positions fence (``projector.position_conflict``)
    _read: int = field(default=0, repr=False)
    _changes: list[Change] = field(default_factory=list, repr=False)

    def changes(self) -> list[Change]:
        """Every assignment change it logged so far, oldest first."""
        text = self.log_file.read_bytes()
        end = text.rfind(b"\n") + 1  # a line being written is read next time
        for line in text[self._read : end].splitlines():
            entry = _entry(line)
            if entry is None:
                continue
            event, at = entry["event"], datetime.fromisoformat(entry["timestamp"]).timestamp()
            if event == "projector.assigned":
                self._changes.append(Change(at, True, frozenset(int(p) for p in entry["positions"])))
            elif event == "projector.revoked":
                self._changes.append(Change(at, False, frozenset(int(p) for p in entry["partitions"])))
            elif event == "projector.start" and self.started_at is None:
                self.started_at = at
            elif event == "projector.position_conflict":
                self.conflicts += 1
        self._read = end
        return list(self._changes)

    def owned(self) -> frozenset[int]:
        owned: set[int] = set()
        for c in self.changes():
            owned = owned | c.partitions if c.assigned else owned - c.partitions
        return frozenset(owned)

    def owned_before(self, at: float) -> frozenset[int]:
        owned: set[int] = set()
        for c in self.changes():
            if c.at >= at:
                break
            owned = owned | c.partitions if c.assigned else owned - c.partitions
        return frozenset(owned)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self, at: float) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.killed_at = at

    def stop(self) -> None:
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def tail(self, chars: int = 2000) -> str:
        return f"--- {self.name} ({self.log_file}):\n" + self.log_file.read_text(errors="replace")[-chars:]


def start_member(name: str, env: dict[str, str], log_dir: Path, *, instance_id: str | None) -> Member:
    """``convlog project`` as a subprocess, its stdout and stderr in ``log_dir/<name>.log``."""
    log_file = log_dir / f"{name}.log"
    member_env = {**env, "CONVLOG_LOG_LEVEL": "info", "CONVLOG_PROJECTOR_INSTANCE_ID": instance_id or ""}
    with log_file.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "convlog.cli.main", "project"], cwd=REPO, env=member_env, stdout=out, stderr=out
        )
    return Member(name, instance_id, process, log_file)


_EVENTS = (b'"projector.assigned"', b'"projector.revoked"', b'"projector.start"', b'"projector.position_conflict"')


def _entry(line: bytes) -> dict[str, Any] | None:
    if not any(e in line for e in _EVENTS):
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) and "event" in entry and "timestamp" in entry else None
