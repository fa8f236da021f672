"""The embedded log's file format, and the survey that tells a torn tail from corruption.

File: an 8-byte magic ``CONVLOG\\x01``, a u32 partition count, then frames
``u32 payload_length | u32 crc32(payload) | payload``; the payload is
``u16 partition | i64 timestamp_ms | u32 key_len key | u32 value_len value |
u16 header_count (u16 name_len name u32 value_len value)*``.

Appends only ever add frames at the end, so damage the writer itself can leave is one torn
tail: the last frame incomplete and nothing after it. A frame that fails its CRC *followed by
intact frames* was damaged after it was written (a flipped bit, an overwritten block) and may
hold an acknowledged record: :func:`survey` reports it as a :class:`CorruptRange`, never as a
tail to cut. A hole frame (empty key, header :data:`HOLE_HEADER`) is what
``convlog log repair`` leaves where a corrupt frame was, so later offsets keep their meaning.

A batch (:meth:`~events.embedded_log.EmbeddedEventLog.append_many`) is several frames written
by one write, each carrying the header :data:`BATCH_HEADER` = ``b"<i>/<n>"`` (readers never see
it: :func:`decode_payload` drops it). A crash can cut that write anywhere — also exactly between
two frames, leaving intact frames of an unfinished batch at the end of the file. Those are part
of the torn tail: :func:`survey` (so opening for writing cuts them) and :func:`scan` (a
read-only follower) stop before the batch's first frame unless its last frame is there. The
writer acknowledges a batch only after its one fsync, so no reader ever sees a part of a batch.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import struct
import zlib
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from events.errors import LogError
from events.keys import partition_for_key
from events.log import Coordinates, LogRecord

MAGIC = b"CONVLOG\x01"
FILE_HEADER = struct.Struct("<8sI")
FRAME_HEADER = struct.Struct("<II")
_PAYLOAD_HEAD = struct.Struct("<HqI")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")
_MIN_PAYLOAD = _PAYLOAD_HEAD.size + _U32.size + _U16.size  # empty key, value and headers
HOLE_HEADER = "convlog-hole"
BATCH_HEADER = "convlog-batch"
_BATCH_NAME = BATCH_HEADER.encode("utf-8")


def batch_header(index: int, count: int) -> tuple[str, bytes]:
    """The header frame ``index`` of a batch of ``count`` frames carries."""
    return BATCH_HEADER, f"{index}/{count}".encode("ascii")


def _batch_position(headers: Sequence[tuple[str, bytes]]) -> tuple[int, int] | None:
    """``(index, count)`` of a batch frame, None for a frame appended alone."""
    for name, value in headers:
        if name == BATCH_HEADER:
            index, _, count = value.partition(b"/")
            return int(index), int(count)
    return None


def unfinished_batch(payload: bytes) -> int | None:
    """For the payload of a batch frame that is not the batch's last: how many frames of the
    batch come before it (None for a batch's last frame and for a frame appended alone)."""
    if _BATCH_NAME not in payload:  # most frames: no parse (it would copy the value)
        return None
    try:
        headers = _parse_payload(payload)[4]
        at = _batch_position(headers)
    except (struct.error, ValueError):
        return None
    if at is None or at[0] + 1 >= at[1]:
        return None
    return at[0]


def encode_frame(
    partition: int, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]], *, now_ms: int | None = None
) -> bytes:
    if now_ms is None:
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
    return FRAME_HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def hole_frame(partition: int, info: Mapping[str, object]) -> bytes:
    """A frame that keeps an offset of ``partition`` taken: it reads as a record with an empty key
    and value (a consumer dead-letters it like any undecodable record) and says where the bytes went."""
    return encode_frame(partition, b"", b"", [(HOLE_HEADER, json.dumps(dict(info), sort_keys=True).encode())])


def decode_payload(payload: bytes, offset: int) -> LogRecord:
    """The record a frame's payload holds (without the file format's own :data:`BATCH_HEADER`)."""
    partition, ts_ms, key, value, headers, _ = _parse_payload(payload)
    return LogRecord(
        partition=partition,
        offset=offset,
        key=key,
        value=value,
        timestamp=datetime.fromtimestamp(ts_ms / 1000, UTC),
        headers=tuple(h for h in headers if h[0] != BATCH_HEADER),
    )


def _parse_payload(payload: bytes) -> tuple[int, int, bytes, bytes, list[tuple[str, bytes]], int]:
    """The payload's fields and where they end (raises ``struct.error``/``ValueError`` when it is malformed)."""
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
    if pos > len(payload):
        raise ValueError("payload fields run past its end")
    return partition, ts_ms, key, value, headers, pos


def frame_at(buf: bytes | mmap.mmap, position: int, size: int, partitions: int) -> int | None:
    """Where the intact frame at ``position`` ends, or None (incomplete, bad CRC, bad partition)."""
    if size - position < FRAME_HEADER.size:
        return None
    length: int
    crc: int
    length, crc = FRAME_HEADER.unpack_from(buf, position)
    start = position + FRAME_HEADER.size
    if length < _MIN_PAYLOAD or start + length > size:
        return None
    if _U16.unpack_from(buf, start)[0] >= partitions:  # cheap, before the CRC
        return None
    if zlib.crc32(memoryview(buf)[start : start + length]) != crc:  # a view: no copy of the payload
        return None
    return start + length


@dataclass(frozen=True)
class CorruptRange:
    """Bytes ``start..end`` of the file that are no intact frame, with intact frames after them
    (or a complete frame at the very end that fails its CRC)."""

    start: int
    end: int
    after: Coordinates | None  # the last intact record before the range
    frames: tuple[tuple[int, int, int], ...] | None  # (partition, start, end) of each damaged frame, when knowable
    offsets: tuple[tuple[int, int], ...] = ()  # (partition, offset) each damaged frame held, when knowable

    def describe(self) -> str:
        where = f"bytes {self.start}..{self.end} ({self.end - self.start} bytes)"
        if self.frames:
            held = ", ".join(f"partition {p} offset {o}" for p, o in self.offsets)
            return f"{where}: {len(self.frames)} damaged frame(s), which held {held}"
        before = f"after partition {self.after.partition} offset {self.after.offset}" if self.after else "at the start"
        return f"{where} {before}: damaged beyond telling which records they held"


@dataclass
class Survey:
    """What a file holds: every intact frame (per partition, its file position), where the last
    one ends, the corrupt ranges, and a torn tail (bytes ``valid_end..size``) if there is one."""

    partitions: int
    index: list[array[int]]
    valid_end: int
    size: int
    corrupt: list[CorruptRange]
    torn_tail: bool

    @property
    def records(self) -> int:
        return sum(len(i) for i in self.index)


def read_header(fd: int, path: Path) -> int:
    """The partition count; :class:`~events.errors.LogError` when ``path`` is no embedded log."""
    header = os.pread(fd, FILE_HEADER.size, 0)
    if len(header) < FILE_HEADER.size or FILE_HEADER.unpack(header)[0] != MAGIC:
        raise LogError(f"{path} is not a convlog embedded log")
    return int(FILE_HEADER.unpack(header)[1])


def held_elsewhere(fd: int) -> bool:
    """Whether another process holds the log's lock (``serve`` or ``project`` writes it). A
    shared lock taken here lasts as long as ``fd`` is open."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    return False


def scan(fd: int, index: list[array[int]], position: int, size: int) -> int:
    """Index the intact frames from ``position`` up to ``size``; where they end. A read-only
    follower uses it (streaming, no mapping: the writer may cut a failed write off meanwhile):
    a frame the writer is still writing stops the scan until next time, and so does a batch
    whose last frame is not there yet (its frames are indexed all at once)."""
    batch: list[tuple[int, int]] = []  # (partition, position) of the unfinished batch's frames so far
    committed = position
    with open(fd, "rb", closefd=False) as f:
        f.seek(position)
        while position < size:
            head = f.read(FRAME_HEADER.size)
            if len(head) < FRAME_HEADER.size:
                break
            length, crc = FRAME_HEADER.unpack(head)
            payload = f.read(length)
            if len(payload) < length or length < _MIN_PAYLOAD or zlib.crc32(payload) != crc:
                break
            (partition,) = _U16.unpack_from(payload, 0)
            if partition >= len(index):
                break
            batch.append((partition, position))
            position += FRAME_HEADER.size + length
            if unfinished_batch(payload) is None:
                for p, at in batch:
                    index[p].append(at)
                batch, committed = [], position
    return committed


def survey(fd: int, partitions: int, *, mapped: bool = True) -> Survey:
    """Every intact frame of the file, and what lies between and after them. ``mapped``: read the
    file through a memory map — only for the lock holder (a file cut under a mapping faults);
    else from a copy."""
    size = os.fstat(fd).st_size
    if size <= FILE_HEADER.size:
        return Survey(partitions, [array("q") for _ in range(partitions)], FILE_HEADER.size, size, [], torn_tail=False)
    if not mapped:
        return survey_bytes(os.pread(fd, size, 0), partitions)
    with mmap.mmap(fd, size, prot=mmap.PROT_READ) as buf:
        return survey_bytes(buf, partitions)


def survey_bytes(buf: bytes | mmap.mmap, partitions: int) -> Survey:
    size = len(buf)
    index: list[array[int]] = [array("q") for _ in range(partitions)]
    corrupt: list[CorruptRange] = []
    position = FILE_HEADER.size
    last: Coordinates | None = None
    damaged = [0] * partitions  # per partition, damaged frames so far: they held offsets too
    last_frame = (-1, -1, -1)  # (partition, start, end) of the last intact frame
    while position < size:
        end = frame_at(buf, position, size, partitions)
        if end is not None:
            partition = _U16.unpack_from(buf, position + FRAME_HEADER.size)[0]
            index[partition].append(position)
            last = Coordinates(partition, len(index[partition]) - 1 + damaged[partition])
            last_frame = (partition, position, end)
            position = end
            continue
        following = _next_intact_frame(buf, position + 1, size, partitions)
        if following is None and _torn(buf, position, size):
            valid_end = _cut_unfinished_batch(buf, index, last_frame, position)
            return Survey(partitions, index, valid_end, size, corrupt, torn_tail=True)
        stop = size if following is None else following
        frames = _attribute(buf, position, stop, partitions)
        offsets: list[tuple[int, int]] = []
        for partition, _, _ in frames or ():
            offsets.append((partition, len(index[partition]) + damaged[partition]))
            damaged[partition] += 1
        corrupt.append(CorruptRange(position, stop, last, frames, tuple(offsets)))
        position = stop
    if not corrupt or corrupt[-1].end <= last_frame[1]:
        valid_end = _cut_unfinished_batch(buf, index, last_frame, size)
        if valid_end < size:  # the file ends between two frames of a batch: a torn tail too
            return Survey(partitions, index, valid_end, size, corrupt, torn_tail=True)
    return Survey(partitions, index, size, size, corrupt, torn_tail=False)


def _cut_unfinished_batch(
    buf: bytes | mmap.mmap, index: list[array[int]], last_frame: tuple[int, int, int], valid_end: int
) -> int:
    """Where the intact part of the file ends once an unfinished batch at its end is taken off
    ``index`` too: the start of the batch's first frame (else ``valid_end`` as it is)."""
    partition, start, end = last_frame
    if start < 0 or end != valid_end:
        return valid_end
    before = unfinished_batch(buf[start + FRAME_HEADER.size : end])
    if before is None or before >= len(index[partition]):
        return valid_end
    first = index[partition][-1 - before]
    del index[partition][-1 - before :]
    return first


def _next_intact_frame(buf: bytes | mmap.mmap, position: int, size: int, partitions: int) -> int | None:
    """The first position at or after ``position`` where an intact frame starts (a byte-wise
    search: the damaged bytes say nothing trustworthy about where the next frame is)."""
    for candidate in range(position, size - FRAME_HEADER.size - _MIN_PAYLOAD + 1):
        if frame_at(buf, candidate, size, partitions) is not None:
            return candidate
    return None


def _torn(buf: bytes | mmap.mmap, position: int, size: int) -> bool:
    """Whether the failing frame at ``position`` (with nothing intact after it) is a write that
    never finished: its header is cut, or it claims more bytes than the file has and those
    bytes do not carry its CRC (a flipped length bit), or what follows is only zeros."""
    if size - position < FRAME_HEADER.size:
        return True
    length: int
    crc: int
    length, crc = FRAME_HEADER.unpack_from(buf, position)
    start = position + FRAME_HEADER.size
    if start + length > size:
        return zlib.crc32(buf[start:size]) != crc
    return bool(buf[position:size].count(0) == size - position)


def _attribute(
    buf: bytes | mmap.mmap, start: int, stop: int, partitions: int
) -> tuple[tuple[int, int, int], ...] | None:
    """Which partition each damaged frame in ``start..stop`` belonged to, when the bytes still say
    so: the frames chain by their lengths (else the range is taken as one frame with a damaged
    length), each parses, and its partition field agrees with its key's murmur2 partition."""
    frames: list[tuple[int, int]] = []
    position = start
    while stop - position >= FRAME_HEADER.size:
        end = position + FRAME_HEADER.size + FRAME_HEADER.unpack_from(buf, position)[0]
        if end > stop:
            break
        frames.append((position, end))
        position = end
    if position != stop:
        frames = [(start, stop)]
    attributed = []
    for a, b in frames:
        try:
            partition, _, key, _, _, used = _parse_payload(buf[a + FRAME_HEADER.size : b])
        except (struct.error, ValueError):
            return None
        if used != b - a - FRAME_HEADER.size or not key or partition_for_key(key, partitions) != partition:
            return None
        attributed.append((partition, a, b))
    return tuple(attributed)
