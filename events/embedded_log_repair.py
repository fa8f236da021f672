"""``convlog log check`` / ``convlog log repair``: the embedded log's damage, shown and moved aside.

Offsets keep their meaning through a repair. Each damaged frame whose bytes still tell its
partition (it parses, and its partition field matches its key's murmur2 partition) is replaced
by a *hole* frame on that partition: the offset stays taken, every later record keeps its offset,
and a reader meets a record with an empty key and value there (a projector dead-letters it with
its coordinates, like any undecodable record). When the damage does not tell how many records
of which partition it held, removing it would renumber later records under the read models'
feet, so repair refuses unless ``renumber`` is given — and then the read models must be rebuilt
from the repaired log (``convlog rebuild read_models --new --switch``).

The damaged bytes go, verbatim, to a side file next to the log (``<log>.damaged-<UTC time>``);
the hole frames name it and where in it their bytes are. The repaired file is written beside
the log, made durable, and renamed over it: a crash mid-repair leaves the old file as it was.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from events.durable import fsync_directory
from events.embedded_frames import CorruptRange, Survey, held_elsewhere, hole_frame, read_header, survey
from events.errors import LogCorruptError, LogError, LogLockedError

_COPY_CHUNK = 1 << 20


@dataclass(frozen=True)
class LogCheck:
    path: Path
    survey: Survey

    @property
    def healthy(self) -> bool:
        return not self.survey.corrupt

    def lines(self) -> list[str]:
        s = self.survey
        per_partition = ", ".join(f"{p}:{len(i)}" for p, i in enumerate(s.index))
        lines = [
            f"{self.path}: {s.size} bytes, {s.partitions} partitions, {s.records} intact records",
            f"  records per partition: {per_partition}",
        ]
        lines.extend(f"  DAMAGED {damaged.describe()}" for damaged in s.corrupt)
        if s.torn_tail:
            lines.append(
                f"  torn tail: bytes {s.valid_end}..{s.size} ({s.size - s.valid_end} bytes), an unfinished last "
                "write that was never acknowledged; it is cut off when the log is next opened for writing"
            )
        if s.corrupt:
            lines.append(
                "  the log will not open for writing until this is repaired: `convlog log repair` "
                "(stop `convlog serve` first)"
            )
        else:
            lines.append("  ok")
        return lines


@dataclass(frozen=True)
class LogRepair:
    side_file: Path | None
    moved: tuple[CorruptRange, ...]
    holes: int
    torn_bytes: int
    renumbered: bool


def log_in_use(path: Path) -> bool:
    """Whether another process holds the embedded log at ``path`` (False when there is none)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return held_elsewhere(fd)
    finally:
        os.close(fd)


def check_log(path: Path) -> LogCheck:
    """Survey the file without changing it (beside a running writer too: then from a copy)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError as e:
        raise LogError(f"there is no embedded log at {path}") from e
    try:
        count = read_header(fd, path)
        # Held by the writer: read a copy, the writer may cut a failed write off under a mapping.
        return LogCheck(path, survey(fd, count, mapped=not held_elsewhere(fd)))
    finally:
        os.close(fd)


def repair_log(path: Path, *, renumber: bool = False, now: datetime | None = None) -> LogRepair:
    """Move the damaged bytes aside (see the module docstring); the log must not be open elsewhere."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError as e:
        raise LogError(f"there is no embedded log at {path}") from e
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            raise LogLockedError(f"{path} is open in another process: stop `convlog serve` first") from e
        count = read_header(fd, path)
        found = survey(fd, count)
        unknown = [r for r in found.corrupt if not r.frames]
        if unknown and not renumber:
            raise LogCorruptError(
                f"{path}: {'; '.join(r.describe() for r in unknown)}. Moving these bytes aside would give later "
                "records of an unknown partition new offsets. Restore the log from a backup, or run "
                "`convlog log repair --renumber` and then rebuild the read models "
                "(`convlog rebuild read_models --new --switch`)"
            )
        torn = found.size - found.valid_end if found.torn_tail else 0
        if not found.corrupt and not torn:
            return LogRepair(None, (), 0, 0, renumbered=False)
        stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S%fZ")
        side = path.with_name(f"{path.name}.damaged-{stamp}")
        holes = _rewrite(fd, path, found, side)
        return LogRepair(side, tuple(found.corrupt), holes, torn, renumbered=bool(unknown))
    finally:
        os.close(fd)  # also releases the lock (on the old inode, now replaced)


def _rewrite(fd: int, path: Path, found: Survey, side: Path) -> int:
    """Damaged bytes (and a torn tail) to ``side``; a copy with holes in their place over ``path``."""
    cut = [(r.start, r.end) for r in found.corrupt]
    if found.torn_tail:
        cut.append((found.valid_end, found.size))
    with side.open("xb", buffering=0) as out:
        where: dict[int, int] = {}
        for start, end in cut:
            where[start] = out.tell()
            _copy(fd, out.fileno(), start, end)
        os.fsync(out.fileno())
    holes = 0
    temporary = path.with_name(f"{path.name}.repairing")
    with temporary.open("wb", buffering=0) as out:
        position = 0
        for r in found.corrupt:
            _copy(fd, out.fileno(), position, r.start)
            for partition, start, end in r.frames or ():  # a range that tells nothing leaves no hole
                info = {
                    "reason": "damaged frame moved aside by convlog log repair",
                    "side_file": side.name,
                    "side_offset": where[r.start] + start - r.start,
                    "length": end - start,
                    "original_position": start,
                }
                _write_all(out.fileno(), hole_frame(partition, info))
                holes += 1
            position = r.end
        _copy(fd, out.fileno(), position, found.valid_end)
        os.fsync(out.fileno())
    temporary.replace(path)
    fsync_directory(path.parent)
    return holes


def _copy(source: int, target: int, start: int, end: int) -> None:
    position = max(start, 0)
    while position < end:
        chunk = os.pread(source, min(_COPY_CHUNK, end - position), position)
        if not chunk:
            raise LogError("the log file shrank while being repaired")
        _write_all(target, chunk)
        position += len(chunk)


def _write_all(target: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(target, view) :]
