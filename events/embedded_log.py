"""The embedded event log: one durable local file, for the demo and fast tests.

Same contract as Kafka: the key's murmur2 partition, dense per-partition offsets, an append
that resolves only once the record is on disk (fsync), readers that never see a record
before it is durable. Concurrent appends share one fsync (group commit). One process only:
the file is locked with ``flock`` and a second opener gets :class:`LogLockedError`.

The file format is in :mod:`events.embedded_frames`. Opening for writing cuts off only a torn
tail (the last write, incomplete, never acknowledged); damaged frames with intact ones after
them are refused with :class:`LogCorruptError`, the file untouched (``convlog log check`` /
``convlog log repair``). A write that fails (disk full) is cut back off at once, so it leaves
no half frame behind, and the log goes on taking appends once there is space.

:meth:`EmbeddedEventLog.append_many` writes a batch's frames contiguously in one write with one
fsync, and acknowledges them together once it returned: all of them or none. A crash during
that write can leave some of its frames intact on disk; they are never acknowledged, and the
frames mark themselves as a batch (:data:`~events.embedded_frames.BATCH_HEADER`) so that
opening the file for writing cuts an unfinished batch off whole, with the torn tail — never a
prefix of a batch is kept.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import time
from array import array
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from events.embedded_frames import (
    FILE_HEADER,
    FRAME_HEADER,
    MAGIC,
    batch_header,
    decode_payload,
    encode_frame,
    read_header,
    scan,
    survey,
)
from events.errors import LogClosedError, LogCorruptError, LogError, LogLockedError, LogStorageFullError
from events.keys import partition_for_key
from events.log import Coordinates, LogRecord, ReadBatch

# errno values that mean "no room": retriable once space is freed, the failed write cut back off.
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_ROOM_PROBE = 1 << 20  # bytes a full log asks room for before it says appends can go on again
_READ_SLICE = 64  # records read between yields to the event loop: long scans must not stall it
# One append waiting for the group commit: its partition, file position, the frame's bytes (or a
# batch's frames back to back, with each frame's length), and the caller's future (Coordinates;
# for a batch, the list of them).
_Pending = tuple[int, int, bytes, tuple[int, ...] | None, asyncio.Future[Any]]

log = structlog.get_logger(__name__)


class EmbeddedEventLog:
    """An :class:`~events.log.EventLog` in one local file. Open it with :meth:`open`."""

    def __init__(self, path: Path, fd: int, partition_count: int, index: list[array[int]], end: int) -> None:
        self._path = path
        self._fd = fd
        self._partition_count = partition_count
        self._index = index  # per partition: file position of each durable record's frame
        self._end = end  # file size once everything pending is written
        self._pending: list[_Pending] = []
        self._flusher: asyncio.Task[None] | None = None
        self._appended = asyncio.Event()
        self._rotation = 0
        self._closed = False
        self._failed: str | None = None  # why a write failed beyond repair: the file's tail is unknown
        self._full: str | None = None  # the last write failed for want of space (none succeeded since)
        self._read_only = False

    @classmethod
    def open(cls, path: Path, *, partitions: int = 12, read_only: bool = False) -> EmbeddedEventLog:
        """Open or create the log file. An existing file keeps the partition count it was created with.

        ``read_only``: open an existing log that another process may be writing — no lock, and
        :meth:`append` refuses. Reads see every complete frame (its CRC checks) the writer has
        written, which may include frames it has not yet fsynced: fine for inspecting, while
        only the writer's own readers are held to durable records.
        """
        if read_only:
            return cls._open_read_only(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            os.close(fd)
            raise LogLockedError(f"{path} is open in another process") from e
        try:
            partition_count, index, end = _load(fd, path, partitions)
        except BaseException:
            os.close(fd)
            raise
        if partition_count != partitions:
            log.warning(
                "embedded_log.partition_count_kept",
                path=str(path),
                stored=partition_count,
                requested=partitions,
            )
        return cls(path, fd, partition_count, index, end)

    @classmethod
    def _open_read_only(cls, path: Path) -> EmbeddedEventLog:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError as e:
            raise LogError(f"there is no embedded log at {path} yet") from e
        try:
            count, index, end = _index_existing(fd, path)
        except BaseException:
            os.close(fd)
            raise
        opened = cls(path, fd, count, index, end)
        opened._read_only = True
        return opened

    def _refresh(self) -> None:
        """Read-only: index the frames the writer added since (a frame still being written fails
        its CRC and is picked up next time)."""
        size = os.fstat(self._fd).st_size
        if size > self._end:
            self._end = scan(self._fd, self._index, self._end, size)

    @property
    def partition_count(self) -> int:
        return self._partition_count

    @property
    def path(self) -> Path:
        return self._path

    async def append(self, *, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]] = ()) -> Coordinates:
        self._check_writable()
        partition = partition_for_key(key, self._partition_count)
        coordinates: Coordinates = await self._enqueue(partition, encode_frame(partition, key, value, headers), None)
        return coordinates

    async def append_many(
        self, *, key: bytes, values: Sequence[tuple[bytes, Sequence[tuple[str, bytes]]]]
    ) -> list[Coordinates]:
        self._check_writable()
        if not values:
            return []
        partition = partition_for_key(key, self._partition_count)
        count = len(values)
        frames = [
            encode_frame(partition, key, value, [*headers, batch_header(i, count)] if count > 1 else headers)
            for i, (value, headers) in enumerate(values)
        ]
        coordinates: list[Coordinates] = await self._enqueue(partition, b"".join(frames), tuple(map(len, frames)))
        return coordinates

    def _check_writable(self) -> None:
        self._check_open()
        if self._read_only:
            raise LogError(f"{self._path} is open read-only here: appends go through the process that holds it")

    def _enqueue(self, partition: int, data: bytes, sizes: tuple[int, ...] | None) -> asyncio.Future[Any]:
        """Queue ``data`` for the next group commit (one write and fsync for everything queued)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((partition, self._end, data, sizes, future))
        self._end += len(data)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        # shield: a cancelled caller must not cancel the group commit other appends wait on.
        return asyncio.shield(future)

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            data = b"".join(frames for _, _, frames, _, _ in batch)
            good_end = batch[0][1]
            try:
                await asyncio.to_thread(_write_and_sync, self._fd, data, good_end)
            except LogStorageFullError as e:
                # The file is back at good_end: fail this batch, move the appends queued since
                # onto good_end, and go on — freed space makes the next write succeed.
                log.error("embedded_log.storage_full", path=str(self._path), error=str(e.__cause__))  # noqa: TRY400 - expected, no traceback
                self._full = str(e)
                self._fail(batch, e)
                self._pending = self._rebased(self._pending, good_end)
                continue
            except OSError as e:
                self._failed = name = errno.errorcode.get(e.errno or 0, "an I/O error")  # refuse further use
                log.exception("embedded_log.write_failed", path=str(self._path))
                failed = LogError(f"writing the embedded log failed ({name}): see the server log")
                self._fail(batch + self._pending, failed)
                self._pending = []
                return
            self._full = None
            for partition, position, _, sizes, future in batch:
                frames = self._index[partition]
                if sizes is None:  # one record
                    frames.append(position)
                    if not future.done():
                        future.set_result(Coordinates(partition, len(frames) - 1))
                    continue
                first, at = len(frames), position
                for size in sizes:
                    frames.append(at)
                    at += size
                if not future.done():
                    future.set_result([Coordinates(partition, offset) for offset in range(first, len(frames))])
            self._appended.set()
            self._appended = asyncio.Event()

    @staticmethod
    def _fail(batch: Sequence[_Pending], error: Exception) -> None:
        for _, _, _, _, future in batch:
            if not future.done():
                future.set_exception(error)

    def _rebased(self, pending: Sequence[_Pending], position: int) -> list[_Pending]:
        rebased = []
        for partition, _, frames, sizes, future in pending:
            rebased.append((partition, position, frames, sizes, future))
            position += len(frames)
        self._end = position
        return rebased

    async def read(self, positions: Mapping[int, int], *, max_records: int = 1000, timeout_s: float = 1.0) -> ReadBatch:
        return ReadBatch.dense(positions, await self._read(positions, max_records, timeout_s))

    async def _read(self, positions: Mapping[int, int], max_records: int, timeout_s: float) -> list[LogRecord]:
        self._check_open()
        for partition in positions:
            if not 0 <= partition < self._partition_count:
                raise LogError(f"partition {partition} does not exist (0..{self._partition_count - 1})")
        if self._read_only:
            return await self._poll(positions, max_records, timeout_s)
        records = await self._read_available(positions, max_records)
        if records or timeout_s <= 0:
            return records
        try:
            await asyncio.wait_for(self._appended.wait(), timeout_s)
        except TimeoutError:
            return []
        return await self._read_available(positions, max_records)

    async def _poll(self, positions: Mapping[int, int], max_records: int, timeout_s: float) -> list[LogRecord]:
        """Read-only: another process appends, so nothing wakes us; look again every 50 ms."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._refresh()
            records = await self._read_available(positions, max_records)
            remaining = deadline - time.monotonic()
            if records or remaining <= 0:
                return records
            await asyncio.sleep(min(0.05, remaining))

    async def _read_available(self, positions: Mapping[int, int], max_records: int) -> list[LogRecord]:
        order = sorted(positions)
        if not order:
            return []
        # Start at a rotating partition so a busy partition cannot starve the others.
        self._rotation = (self._rotation + 1) % len(order)
        order = order[self._rotation :] + order[: self._rotation]
        records: list[LogRecord] = []
        for partition in order:
            frames = self._index[partition]
            start = max(positions[partition], 0)
            stop = min(len(frames), start + max_records - len(records))
            for first in range(start, stop, _READ_SLICE):
                if first > start:  # a long read lets other requests run between slices
                    await asyncio.sleep(0)
                    self._check_open()
                last = min(stop, first + _READ_SLICE)
                records.extend(_read_frame(self._fd, frames[offset], offset) for offset in range(first, last))
            if len(records) >= max_records:
                break
        return records

    async def end_offsets(self, partitions: Collection[int] | None = None) -> dict[int, int]:
        self._check_open()
        if self._read_only:
            self._refresh()
        return {p: len(frames) for p, frames in enumerate(self._index) if partitions is None or p in partitions}

    async def close(self) -> None:
        if self._closed:
            return
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
        self._closed = True
        if not self._read_only:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)

    @property
    def failed(self) -> str | None:
        """Why this log stopped for good (a write failed other than for want of space: only a
        restart, which reopens the file and cuts a torn tail, makes it usable again); None."""
        return None if self._failed is None else f"the embedded log stopped after a failed write ({self._failed})"

    def storage_full(self) -> str | None:
        """Why appends are refused for want of space now, or None. Asked only after a write
        failed so (and no write is under way): the file system is asked for room past the end
        (``posix_fallocate``, cut back at once; a crash in between leaves a zero tail, which
        opening cuts), so freed space counts before any append tries."""
        if self._full is None or self._pending or not (self._flusher is None or self._flusher.done()):
            return self._full
        try:
            os.posix_fallocate(self._fd, self._end, _ROOM_PROBE)
        except OSError as e:
            if e.errno in _NO_SPACE:
                return self._full
        finally:
            os.ftruncate(self._fd, self._end)
        self._full = None
        return None

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("the embedded log is closed")
        if self._failed is not None:  # no path: this message can reach API clients
            raise LogError(f"the embedded log stopped after a failed write ({self._failed}): see the server log")


def _write_and_sync(fd: int, data: bytes, position: int) -> None:
    """Write ``data`` at ``position`` and make it durable. When the disk is full, cut the file back
    to ``position`` first — a half-written frame must not stay behind to look like damage later —
    then raise :class:`LogStorageFullError` (nothing of the write was kept)."""
    try:
        view = memoryview(data)
        at = position
        while view:
            written = os.pwrite(fd, view, at)
            view = view[written:]
            at += written
        os.fdatasync(fd)
    except OSError as e:
        if e.errno not in _NO_SPACE:
            raise
        os.ftruncate(fd, position)  # frees the space the partial write took; may raise in turn
        os.fdatasync(fd)
        raise LogStorageFullError(f"the log's disk is full ({errno.errorcode.get(e.errno or 0, e.errno)})") from e


def _read_frame(fd: int, position: int, offset: int) -> LogRecord:
    length, _ = FRAME_HEADER.unpack(os.pread(fd, FRAME_HEADER.size, position))
    return decode_payload(os.pread(fd, length, position + FRAME_HEADER.size), offset)


def _load(fd: int, path: Path, partitions: int) -> tuple[int, list[array[int]], int]:
    """Read the header (or write it) and index every intact frame. Cut off a torn tail; refuse a
    file with damaged frames before intact ones, leaving it as it is."""
    size = os.fstat(fd).st_size
    if size < FILE_HEADER.size:
        if partitions < 1:
            raise LogError("partitions must be >= 1")
        os.ftruncate(fd, 0)
        os.pwrite(fd, FILE_HEADER.pack(MAGIC, partitions), 0)
        os.fsync(fd)
        return partitions, [array("q") for _ in range(partitions)], FILE_HEADER.size
    count = read_header(fd, path)
    found = survey(fd, count)
    if found.corrupt:
        ranges = "; ".join(r.describe() for r in found.corrupt)
        raise LogCorruptError(
            f"{path} is damaged: {ranges}. It was not opened for writing and is left untouched. "
            "See `convlog log check`; `convlog log repair` moves the damaged bytes aside"
            " (docs/operating.md: When things go wrong)"
        )
    if found.torn_tail:
        log.warning(
            "embedded_log.torn_tail_truncated",
            path=str(path),
            kept_bytes=found.valid_end,
            dropped_bytes=size - found.valid_end,
        )
        os.ftruncate(fd, found.valid_end)
        os.fsync(fd)
    return count, found.index, found.valid_end


def _index_existing(fd: int, path: Path) -> tuple[int, list[array[int]], int]:
    """The header and the intact frames (where they end), changing nothing."""
    count = read_header(fd, path)
    index = [array("q") for _ in range(count)]
    return count, index, scan(fd, index, FILE_HEADER.size, os.fstat(fd).st_size)
