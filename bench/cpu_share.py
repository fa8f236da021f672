"""Where a run's CPU goes on this machine: per-process CPU sampled from /proc during the run.

A rebuild's throughput on a small machine is bounded by the cores left to it, not by its wall
clock alone: the workers, the Postgres backends serving them, the Kafka broker, Postgres' own
background processes (WAL writer, checkpointer) and whatever else runs on the machine share the
same cores. :class:`CpuShares` samples, on a thread, every process' cumulative CPU time
(``/proc/<pid>/stat``, utime + stime) and sorts them into those groups; a process that exits
during the run keeps what it used up to its last sample (every 50 ms), so the short-lived
workers and their backends are counted too. Linux only; elsewhere every group reads 0.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROC = Path("/proc")

GROUPS = ("rebuild workers", "bench process", "Postgres backends", "Postgres background", "Kafka broker", "other")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of ``pid``, or None once it is gone."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK


def _cmdline(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\x00", b" ").decode(errors="replace")
    except OSError:
        return ""


def _machine_busy_s() -> float:
    """CPU seconds every core spent not idle since boot (/proc/stat's first line)."""
    try:
        values = [int(v) for v in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0.0
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return (sum(values[:8]) - idle) / _TICK


def listening_pid(port: int) -> int | None:
    """The process listening on TCP ``port`` (the Kafka broker of the bootstrap address)."""
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (PROC / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(parts[9])
    if not inodes:
        return None
    for pid_dir in PROC.iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            for fd in (pid_dir / "fd").iterdir():
                target = str(fd.readlink())
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    return int(pid_dir.name)
        except OSError:
            continue
    return None


@dataclass
class CpuShares:
    """CPU seconds per group between :meth:`start` and :meth:`stop`.

    ``database``: the run's own (scratch) database — its backends' process titles name it, so
    other engineers' backends count as "other". ``postmaster``: the Postgres server's pid; its
    children that serve no database are its background processes."""

    database: str
    postmaster: int | None
    kafka: int | None
    interval_s: float = 0.05
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0.0))
    wall_s: float = 0.0
    # (wall, its CPU, the Kafka broker's, its Postgres backends') seconds a worker process takes to be ready
    worker_start: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    _first: dict[int, float] = field(default_factory=dict)
    _last: dict[int, tuple[str, float]] = field(default_factory=dict)
    _groups: dict[int, tuple[str, int]] = field(default_factory=dict)  # pid -> (group, parent pid)
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _machine: float = 0.0
    _started: float = 0.0

    def _group(self, pid: int, ppid: int) -> str:
        me = os.getpid()
        if pid == me:
            return "bench process"
        if ppid == me or "convlog.ops.rebuild_worker" in _cmdline(pid):
            return "rebuild workers"
        if pid == self.kafka:
            return "Kafka broker"
        if self.postmaster is not None and ppid == self.postmaster:
            title = _cmdline(pid)
            if not title.startswith("postgres: "):
                return "other"  # just forked: its title does not say yet what it serves
            if "(" not in title and "[local]" not in title:  # a backend's title has its client's address
                return "Postgres background"
            return "Postgres backends" if f" {self.database} " in title else "other"
        return "other"

    def _sample(self, *, first: bool = False) -> None:
        """Each process' CPU so far. Cheap after the first call (on the sampling thread, beside a
        rebuild running in this process): a process is classified once — again only while it is
        an unclassified child of the postmaster — and only the run's own are read again."""
        for name in os.listdir(PROC):  # noqa: PTH208 - names only, no Path per process every 50 ms
            if not name.isdigit():
                continue
            pid = int(name)
            if first:
                stat = _stat(pid)
                if stat is not None:
                    self._first[pid] = stat[1]
                continue
            known = self._groups.get(pid)
            if known is None or (known[0] == "other" and known[1] == self.postmaster):
                stat = _stat(pid)
                if stat is None:
                    continue
                known = self._groups[pid] = (self._group(pid, stat[0]), stat[0])
            if known[0] == "other":
                continue
            stat = _stat(pid)
            if stat is not None:
                self._last[pid] = (known[0], stat[1])

    def start(self) -> None:
        self._machine, self._started = _machine_busy_s(), time.perf_counter()
        self._sample(first=True)

        def run() -> None:
            while not self._done.wait(self.interval_s):
                self._sample()

        self._thread = threading.Thread(target=run, name="cpu-shares", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self.wall_s = time.perf_counter() - self._started
        for pid, (group, cpu) in self._last.items():
            self.seconds[group] += cpu - self._first.get(pid, 0.0)
        ours = sum(v for k, v in self.seconds.items() if k != "other")
        # What the machine's counters say was busy, minus ours: includes processes too short to sample.
        self.seconds["other"] = max(0.0, _machine_busy_s() - self._machine - ours)

    def cores(self, group: str) -> float:
        return self.seconds[group] / self.wall_s if self.wall_s else 0.0

    @property
    def ours_s(self) -> float:
        return sum(v for k, v in self.seconds.items() if k != "other")

    @property
    def cores_ours(self) -> float:
        return self.ours_s / self.wall_s if self.wall_s else 0.0

    def per_event(self, n: int) -> str:
        """CPU microseconds per event: the workers' Python (with the bench process, which runs the
        only worker in-process), Postgres (backends and background), the Kafka broker."""
        s = self.seconds
        python = s["rebuild workers"] + s["bench process"]
        postgres = s["Postgres backends"] + s["Postgres background"]
        return " / ".join(f"{v / n * 1e6:.1f} us" for v in (python, postgres, s["Kafka broker"]))


def parent_pid(pid: int) -> int | None:
    stat = _stat(pid)
    return None if stat is None else stat[0]
