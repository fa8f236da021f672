"""What the embedded backend adds to the contract: durability, crash recovery, one owner."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from events.embedded_log import EmbeddedEventLog
from events.errors import LogCorruptError, LogError, LogLockedError
from events.log import Coordinates


async def test_records_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    log = EmbeddedEventLog.open(path, partitions=3)
    sent = [await log.append(key=f"k{i}".encode(), value=f"v{i}".encode(), headers=[("h", b"1")]) for i in range(9)]
    await log.close()
    reopened = EmbeddedEventLog.open(path, partitions=3)
    try:
        records = (await reopened.read(dict.fromkeys(range(3), 0), timeout_s=0)).records
        assert sorted(r.coordinates for r in records) == sorted(sent)
        assert {r.value for r in records} == {f"v{i}".encode() for i in range(9)}
        more = await reopened.append(key=b"k0", value=b"again")
        assert more.offset == max(c.offset for c in sent if c.partition == more.partition) + 1
    finally:
        await reopened.close()


async def test_an_existing_file_keeps_its_partition_count(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    await EmbeddedEventLog.open(path, partitions=5).close()
    log = EmbeddedEventLog.open(path, partitions=12)
    assert log.partition_count == 5
    await log.close()


async def test_a_torn_tail_is_cut_off_and_the_log_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    log = EmbeddedEventLog.open(path, partitions=1)
    for i in range(3):
        await log.append(key=b"k", value=f"v{i}".encode())
    await log.close()
    intact = path.stat().st_size
    with path.open("ab") as f:
        f.write(b"\x40\x00\x00\x00\x01\x02partial frame from a crash")
    log = EmbeddedEventLog.open(path, partitions=1)
    try:
        assert path.stat().st_size == intact
        assert (await log.append(key=b"k", value=b"v3")).offset == 3
        assert [r.value for r in (await log.read({0: 0}, timeout_s=0)).records] == [b"v0", b"v1", b"v2", b"v3"]
    finally:
        await log.close()


async def test_a_damaged_last_frame_is_refused_not_cut_off(tmp_path: Path) -> None:
    """A complete frame failing its CRC was written whole, and may have been acknowledged: the
    log refuses to open rather than drop it (tests/test_embedded_log_corruption.py has the rest)."""
    path = tmp_path / "events.log"
    log = EmbeddedEventLog.open(path, partitions=1)
    for i in range(3):
        await log.append(key=b"k", value=f"value-{i}".encode())
    await log.close()
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # flip a byte inside the last frame: its CRC no longer matches
    path.write_bytes(bytes(data))
    with pytest.raises(LogCorruptError, match="partition 0 offset 2"):
        EmbeddedEventLog.open(path, partitions=1)
    assert path.read_bytes() == bytes(data)


async def test_a_second_process_cannot_open_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    log = EmbeddedEventLog.open(path, partitions=1)
    try:
        probe = (
            "import sys\nfrom pathlib import Path\nfrom events.embedded_log import EmbeddedEventLog\n"
            "from events.errors import LogLockedError\n"
            "try:\n    EmbeddedEventLog.open(Path(sys.argv[1]))\nexcept LogLockedError:\n    sys.exit(3)\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", probe, str(path)],
            check=False,
            cwd=Path(__file__).parent.parent,
            env=os.environ.copy(),
        )
        assert result.returncode == 3
        with pytest.raises(LogLockedError):
            EmbeddedEventLog.open(path)
    finally:
        await log.close()
    await EmbeddedEventLog.open(path).close()  # the lock goes with the owner


async def test_a_foreign_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "not-a-log"
    path.write_bytes(b"hello world, this is not a convlog file")
    with pytest.raises(LogError, match="not a convlog embedded log"):
        EmbeddedEventLog.open(path)


async def test_a_cancelled_append_is_still_written(tmp_path: Path) -> None:
    """Like Kafka, giving up on an append does not unsend it; the record keeps its offset."""
    import asyncio  # noqa: PLC0415

    log = EmbeddedEventLog.open(tmp_path / "events.log", partitions=1)
    try:
        task = asyncio.create_task(log.append(key=b"k", value=b"first"))
        await asyncio.sleep(0)
        task.cancel()
        second = await log.append(key=b"k", value=b"second")
        assert second.offset == 1
        assert [r.value for r in (await log.read({0: 0}, timeout_s=0)).records] == [b"first", b"second"]
    finally:
        await log.close()


async def test_a_read_only_opener_reads_beside_the_writer_and_follows_it(tmp_path: Path) -> None:
    """What `convlog replay` / `tail` / `positions` / `verify` do while `convlog serve` holds the log."""
    path = tmp_path / "events.log"
    writer = EmbeddedEventLog.open(path, partitions=2)
    reader: EmbeddedEventLog | None = None
    try:
        first = [await writer.append(key=b"k", value=f"v{i}".encode()) for i in range(3)]
        reader = EmbeddedEventLog.open(path, read_only=True)
        partition = first[0].partition
        assert (reader.partition_count, (await reader.end_offsets())[partition]) == (2, 3)
        assert [r.value for r in (await reader.read({partition: 0}, timeout_s=0)).records] == [b"v0", b"v1", b"v2"]
        # A frame the writer is in the middle of writing (here: half of one) is not a record yet ...
        raw = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(raw, b"\x40\x00\x00\x00\x01\x02\x03\x04half a frame", os.fstat(raw).st_size)
        finally:
            os.close(raw)
        assert (await reader.end_offsets())[partition] == 3
        assert (await reader.read({partition: 3}, timeout_s=0.1)).records == []
        # ... and once it is written over with whole frames, a waiting read picks them up.
        pending = asyncio.ensure_future(reader.read({partition: 3}, timeout_s=5))
        await asyncio.sleep(0.1)
        await writer.append(key=b"k", value=b"v3")
        assert [(r.offset, r.value) for r in (await pending).records] == [(3, b"v3")]
        with pytest.raises(LogError, match="read-only"):
            await reader.append(key=b"k", value=b"nope")
    finally:
        if reader is not None:
            await reader.close()
        await writer.close()
    with pytest.raises(LogError, match="no embedded log"):
        EmbeddedEventLog.open(tmp_path / "missing.log", read_only=True)


async def _batch_on_disk(path: Path) -> tuple[list[int], int]:
    """A log holding one record, then a batch of three: the batch's frame positions, the file size."""
    log = EmbeddedEventLog.open(path, partitions=1)
    await log.append(key=b"k", value=b"before")
    await log.append_many(key=b"k", values=[(f"b{i}".encode(), [("h", b"x")]) for i in range(3)])
    positions = list(log._index[0])
    await log.close()
    return positions[1:], path.stat().st_size


@pytest.mark.parametrize("cut", ["between_frames", "inside_a_frame", "inside_the_last_frame"])
async def test_a_crash_mid_batch_leaves_none_of_the_batch(tmp_path: Path, cut: str) -> None:
    """A write cut anywhere inside a batch — also exactly between two of its frames, where every
    frame before the cut is intact — keeps none of the batch once the log is opened again."""
    path = tmp_path / "events.log"
    frames, size = await _batch_on_disk(path)
    at = {"between_frames": frames[2], "inside_a_frame": frames[1] + 5, "inside_the_last_frame": size - 3}[cut]
    os.truncate(path, at)
    follower = EmbeddedEventLog.open(path, read_only=True)  # an inspector reading the torn file
    try:
        assert [r.value for r in (await follower.read({0: 0}, timeout_s=0)).records] == [b"before"]
    finally:
        await follower.close()
    log = EmbeddedEventLog.open(path, partitions=1)
    try:
        assert path.stat().st_size == frames[0]
        assert [r.value for r in (await log.read({0: 0}, timeout_s=0)).records] == [b"before"]
        assert await log.append_many(key=b"k", values=[(b"again", [])]) == [Coordinates(0, 1)]
    finally:
        await log.close()


async def test_a_whole_batch_survives_reopening_without_its_marker(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    await _batch_on_disk(path)
    log = EmbeddedEventLog.open(path, partitions=1)
    try:
        records = (await log.read({0: 0}, timeout_s=0)).records
        expected = [(f"b{i}".encode(), [("h", b"x")]) for i in range(3)]
        assert [(r.value, list(r.headers)) for r in records[1:]] == expected
    finally:
        await log.close()
