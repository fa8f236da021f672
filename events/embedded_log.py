"""The embedded event log: one durable local file, for the demo and fast tests.

Same contract as Kafka: the key's murmur2 partition, dense per-partition offsets, an append
that resolves only once the record is on disk (fsync), readers that never see a record
before it is durable. Concurrent appends share one fsync (group commit). One process only:
the file is locked with ``flock`` and a second opener gets :class:`LogLockedError`.

File format: an 8-byte magic ``CONVLOG\\x01``, a u32 partition count, then frames
``u32 payload_length | u32 crc32(payload) | payload``; the payload is
``u16 partition | i64 timestamp_ms | u32 key_len key | u32 value_len value |
u16 header_count (u16 name_len name u32 value_len value)*``. A torn tail left by a crash is
cut off on open: it was never acknowledged.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import struct
import time
import zlib
from array import array
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import structlog

from events.errors import LogClosedError, LogError, LogLockedError
from events.keys import partition_for_key
from events.log import Coordinates, LogRecord, ReadBatch

_MAGIC = b"CONVLOG\x01"
_FILE_HEADER = struct.Struct("<8sI")
_FRAME_HEADER = struct.Struct("<II")
_PAYLOAD_HEAD = struct.Struct("<HqI")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")

log = structlog.get_logger(__name__)


class EmbeddedEventLog:
    """An :class:`~events.log.EventLog` in one local file. Open it with :meth:`open`."""

    def __init__(self, path: Path, fd: int, partition_count: int, index: list[array[int]], end: int) -> None:
        self._path = path
        self._fd = fd
        self._partition_count = partition_count
        self._index = index  # per partition: file position of each durable record's frame
        self._end = end  # file size once everything pending is written
        self._next_offset = [len(i) for i in index]
        self._pending: list[tuple[int, int, bytes, asyncio.Future[Coordinates]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._appended = asyncio.Event()
        self._rotation = 0
        self._closed = False
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
            self._end = _scan(self._fd, self._index, self._end, size)

    @property
    def partition_count(self) -> int:
        return self._partition_count

    @property
    def path(self) -> Path:
        return self._path

    async def append(self, *, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]] = ()) -> Coordinates:
        self._check_open()
        if self._read_only:
            raise LogError(f"{self._path} is open read-only here: appends go through the process that holds it")
        partition = partition_for_key(key, self._partition_count)
        frame = _encode_frame(partition, key, value, headers)
        offset = self._next_offset[partition]
        self._next_offset[partition] = offset + 1
        future: asyncio.Future[Coordinates] = asyncio.get_running_loop().create_future()
        self._pending.append((partition, self._end, frame, future))
        self._end += len(frame)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        # shield: a cancelled caller must not cancel the group commit other appends wait on.
        return await asyncio.shield(future)

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            data = b"".join(frame for _, _, frame, _ in batch)
            try:
                await asyncio.to_thread(_write_and_sync, self._fd, data, batch[0][1])
            except OSError as e:
                self._closed = True  # the file's tail is now unknown: refuse further use
                for _, _, _, future in batch:
                    if not future.done():
                        future.set_exception(LogError(f"writing {self._path} failed: {e}"))
                return
            for partition, position, _, future in batch:
                self._index[partition].append(position)
                if not future.done():
                    future.set_result(Coordinates(partition, len(self._index[partition]) - 1))
            self._appended.set()
            self._appended = asyncio.Event()

    async def read(self, positions: Mapping[int, int], *, max_records: int = 1000, timeout_s: float = 1.0) -> ReadBatch:
        return ReadBatch.dense(positions, await self._read(positions, max_records, timeout_s))

    async def _read(self, positions: Mapping[int, int], max_records: int, timeout_s: float) -> list[LogRecord]:
        self._check_open()
        for partition in positions:
            if not 0 <= partition < self._partition_count:
                raise LogError(f"partition {partition} does not exist (0..{self._partition_count - 1})")
        if self._read_only:
            return await self._poll(positions, max_records, timeout_s)
        records = self._read_available(positions, max_records)
        if records or timeout_s <= 0:
            return records
        try:
            await asyncio.wait_for(self._appended.wait(), timeout_s)
        except TimeoutError:
            return []
        return self._read_available(positions, max_records)

    async def _poll(self, positions: Mapping[int, int], max_records: int, timeout_s: float) -> list[LogRecord]:
        """Read-only: another process appends, so nothing wakes us; look again every 50 ms."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._refresh()
            records = self._read_available(positions, max_records)
            remaining = deadline - time.monotonic()
            if records or remaining <= 0:
                return records
            await asyncio.sleep(min(0.05, remaining))

    def _read_available(self, positions: Mapping[int, int], max_records: int) -> list[LogRecord]:
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
            records.extend(_read_frame(self._fd, frames[offset], offset) for offset in range(start, stop))
            if len(records) >= max_records:
                break
        return records

    async def end_offsets(self) -> dict[int, int]:
        self._check_open()
        if self._read_only:
            self._refresh()
        return {p: len(frames) for p, frames in enumerate(self._index)}

    async def close(self) -> None:
        if self._closed:
            return
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
        self._closed = True
        if not self._read_only:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"embedded log {self._path} is closed")


def _encode_frame(partition: int, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]]) -> bytes:
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    parts = [
        _PAYLOAD_HEAD.pack(partition, now_ms, len(key)),
        key,
        _U32.pack(len(value)),
        value,
        _U16.pack(len(headers)),
    ]
    for name, header_value in headers:
        raw_name = name.encode("utf-8")
        parts += [_U16.pack(len(raw_name)), raw_name, _U32.pack(len(header_value)), header_value]
    payload = b"".join(parts)
    return _FRAME_HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def _write_and_sync(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written
    os.fdatasync(fd)


def _read_frame(fd: int, position: int, offset: int) -> LogRecord:
    length, _ = _FRAME_HEADER.unpack(os.pread(fd, _FRAME_HEADER.size, position))
    return _decode_payload(os.pread(fd, length, position + _FRAME_HEADER.size), offset)


def _decode_payload(payload: bytes, offset: int) -> LogRecord:
    partition, ts_ms, key_len = _PAYLOAD_HEAD.unpack_from(payload, 0)
    pos = _PAYLOAD_HEAD.size
    key = payload[pos : pos + key_len]
    pos += key_len
    (value_len,) = _U32.unpack_from(payload, pos)
    pos += _U32.size
    value = payload[pos : pos + value_len]
    pos += value_len
    (count,) = _U16.unpack_from(payload, pos)
    pos += _U16.size
    headers: list[tuple[str, bytes]] = []
    for _ in range(count):
        (name_len,) = _U16.unpack_from(payload, pos)
        pos += _U16.size
        name = payload[pos : pos + name_len].decode("utf-8")
        pos += name_len
        (hv_len,) = _U32.unpack_from(payload, pos)
        pos += _U32.size
        headers.append((name, payload[pos : pos + hv_len]))
        pos += hv_len
    return LogRecord(
        partition=partition,
        offset=offset,
        key=key,
        value=value,
        timestamp=datetime.fromtimestamp(ts_ms / 1000, UTC),
        headers=tuple(headers),
    )


def _load(fd: int, path: Path, partitions: int) -> tuple[int, list[array[int]], int]:
    """Read the header (or write it), index every intact frame, cut off a torn tail."""
    size = os.fstat(fd).st_size
    if size < _FILE_HEADER.size:
        if partitions < 1:
            raise LogError("partitions must be >= 1")
        os.ftruncate(fd, 0)
        os.pwrite(fd, _FILE_HEADER.pack(_MAGIC, partitions), 0)
        os.fsync(fd)
        return partitions, [array("q") for _ in range(partitions)], _FILE_HEADER.size
    count, index, position = _index_existing(fd, path)
    if position < size:
        log.warning(
            "embedded_log.torn_tail_truncated",
            path=str(path),
            kept_bytes=position,
            dropped_bytes=size - position,
        )
        os.ftruncate(fd, position)
        os.fsync(fd)
    return count, index, position


def _index_existing(fd: int, path: Path) -> tuple[int, list[array[int]], int]:
    """The header and the intact frames (where they end), changing nothing."""
    header = os.pread(fd, _FILE_HEADER.size, 0)
    if len(header) < _FILE_HEADER.size or _FILE_HEADER.unpack(header)[0] != _MAGIC:
        raise LogError(f"{path} is not a convlog embedded log")
    count = _FILE_HEADER.unpack(header)[1]
    index = [array("q") for _ in range(count)]
    return count, index, _scan(fd, index, _FILE_HEADER.size, os.fstat(fd).st_size)


def _scan(fd: int, index: list[array[int]], position: int, size: int) -> int:
    """Index the intact frames from ``position`` up to ``size``; where they end (a torn or
    half-written frame stops the scan)."""
    count = len(index)
    with open(fd, "rb", closefd=False) as f:
        f.seek(position)
        while position < size:
            head = f.read(_FRAME_HEADER.size)
            if len(head) < _FRAME_HEADER.size:
                break
            length, crc = _FRAME_HEADER.unpack(head)
            payload = f.read(length)
            if len(payload) < length or zlib.crc32(payload) != crc:
                break
            (partition,) = _U16.unpack_from(payload, 0)
            if partition >= count:
                break
            index[partition].append(position)
            position += _FRAME_HEADER.size + length
    return position
