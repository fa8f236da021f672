"""Damage to the embedded log file: no acknowledged record is ever dropped silently.

Every case ends either in exactly the acknowledged records or in a clear refusal that leaves
the file as it was; ``convlog log repair`` then moves the damage aside and keeps every intact
record at its offset.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import struct
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from convlog.cli.main import build_parser
from convlog.settings import Settings
from events.embedded_log import EmbeddedEventLog
from events.embedded_log_repair import check_log, repair_log
from events.errors import LogCorruptError
from events.keys import ConversationKey
from events.log import Coordinates, LogRecord
from events.producer import ConversationProducer
from tests.projection_support import Projection, project_all

HEADER = 12  # magic + partition count


def cli_main(argv: list[str]) -> int:
    """``convlog ARGV``'s exit code, in-process but without ``cli.main``'s logging setup (it binds
    structlog to this test's captured stderr, for every later test)."""
    args = build_parser().parse_args(argv)
    code: int = args.handler(Settings.from_env(), args)
    return code


async def _write(path: Path, count: int, *, partitions: int = 3) -> list[tuple[Coordinates, bytes]]:
    log = EmbeddedEventLog.open(path, partitions=partitions)
    try:
        values = [f"value-{i:03d}".encode() * 3 for i in range(count)]
        return [(await log.append(key=f"t:u:c{i % 7}".encode(), value=v), v) for i, v in enumerate(values)]
    finally:
        await log.close()


async def _all(path: Path, partitions: int = 3) -> list[LogRecord]:
    log = EmbeddedEventLog.open(path, partitions=partitions)
    try:
        return sorted(
            (await log.read(dict.fromkeys(range(partitions), 0), max_records=10_000, timeout_s=0)).records,
            key=lambda r: (r.partition, r.offset),
        )
    finally:
        await log.close()


def _frame_starts(path: Path) -> list[int]:
    data = path.read_bytes()
    starts, position = [], HEADER
    while position < len(data):
        starts.append(position)
        position += 8 + struct.unpack_from("<I", data, position)[0]
    return starts


def _flip(path: Path, position: int, bit: int = 0x10) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= bit
    path.write_bytes(bytes(data))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_a_flipped_bit_mid_file_is_refused_and_the_file_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    sent = await _write(path, 60)
    victim = _frame_starts(path)[20]
    _flip(path, victim + 8 + 30)  # inside the value of the 21st record
    before = _digest(path)
    with pytest.raises(
        LogCorruptError,
        match=rf"bytes {victim}\.\.\d+ .*partition {sent[20][0].partition} offset "
        rf"{sent[20][0].offset}.*convlog log repair",
    ) as refused:
        EmbeddedEventLog.open(path, partitions=3)
    assert "convlog log check" in str(refused.value)
    assert _digest(path) == before  # nothing cut off, nothing rewritten

    report = check_log(path)
    assert not report.healthy
    assert report.survey.records == 59
    assert any(
        "DAMAGED" in line and f"partition {sent[20][0].partition} offset {sent[20][0].offset}" in line
        for line in report.lines()
    )
    assert cli_main(["log", "check", "--path", str(path)]) == 1


async def test_repair_keeps_every_intact_record_at_its_offset(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    sent = await _write(path, 60)
    victim = _frame_starts(path)[20]
    damaged = path.read_bytes()[victim : _frame_starts(path)[21]]
    _flip(path, victim + 8 + 30)
    flipped = path.read_bytes()[victim : _frame_starts(path)[21]]

    assert cli_main(["log", "repair", "--path", str(path)]) == 0
    sides = list(tmp_path.glob("events.log.damaged-*"))
    assert len(sides) == 1
    assert sides[0].read_bytes() == flipped != damaged  # the bytes moved aside, verbatim

    records = await _all(path)
    by_coordinates = {r.coordinates: r for r in records}
    for i, (coordinates, value) in enumerate(sent):
        if i == 20:  # the damaged record's offset stays taken by a hole: no later offset moves
            hole = by_coordinates[coordinates]
            assert (hole.key, hole.value) == (b"", b"")
            assert dict(hole.headers)["convlog-hole"].startswith(b"{")
        else:
            assert by_coordinates[coordinates].value == value
    assert len(records) == 60
    assert cli_main(["log", "check", "--path", str(path)]) == 0

    log = EmbeddedEventLog.open(path, partitions=3)
    try:
        more = await log.append(key=b"t:u:c0", value=b"after the repair")
        assert more.offset == max(c.offset for c, _ in sent if c.partition == more.partition) + 1
    finally:
        await log.close()


async def test_damage_that_hides_its_records_is_not_repaired_without_renumber(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    sent = await _write(path, 30)
    starts = _frame_starts(path)
    data = bytearray(path.read_bytes())
    data[starts[10] : starts[13]] = bytes(starts[13] - starts[10])  # three frames zeroed: which partitions?
    path.write_bytes(bytes(data))
    with pytest.raises(LogCorruptError, match="damaged beyond telling"):
        EmbeddedEventLog.open(path, partitions=3)
    before = _digest(path)
    with pytest.raises(LogCorruptError, match="--renumber"):
        repair_log(path)
    assert _digest(path) == before
    repaired = repair_log(path, renumber=True)
    assert repaired.renumbered
    assert repaired.holes == 0
    values = [r.value for r in await _all(path)]
    assert sorted(values) == sorted(v for i, (_, v) in enumerate(sent) if not 10 <= i < 13)


@pytest.mark.parametrize(
    ("damage", "outcome"),
    [
        ("torn_frame", "all_but_last"),  # a crash mid-append: the unfinished frame was never acknowledged
        ("three_bytes_cut", "all_but_last"),  # the last frame incomplete: only a torn write looks like this
        ("zeros_appended", "all"),  # an extended file whose data never reached the disk
        ("last_frame_flipped", "refused"),  # a complete, acknowledged frame damaged afterwards
        ("last_length_flipped", "refused"),  # looks longer than the file, but its bytes carry its CRC
        ("first_frame_flipped", "refused"),
    ],
)
async def test_every_kind_of_damage_ends_in_the_exact_records_or_a_refusal(
    tmp_path: Path, damage: str, outcome: str
) -> None:
    path = tmp_path / "events.log"
    sent = await _write(path, 12)
    starts = _frame_starts(path)
    data = bytearray(path.read_bytes())
    if damage == "torn_frame":
        data += data[starts[-1] :][:-5]
        sent.append(sent[-1])  # (never acknowledged; dropped below with the last)
    elif damage == "three_bytes_cut":
        del data[-3:]
    elif damage == "zeros_appended":
        data += bytes(300)
    elif damage == "last_frame_flipped":
        data[-3] ^= 0xFF
    elif damage == "last_length_flipped":
        data[starts[-1] + 2] ^= 0x01  # the length grows by 64 KiB
    elif damage == "first_frame_flipped":
        data[starts[0] + 20] ^= 0x01
    path.write_bytes(bytes(data))
    before = _digest(path)

    if outcome == "refused":
        with pytest.raises(LogCorruptError, match=r"bytes \d+\.\.\d+"):
            EmbeddedEventLog.open(path, partitions=3)
        assert _digest(path) == before
        assert cli_main(["log", "check", "--path", str(path)]) == 1
        return
    expected = sent if outcome == "all" else sent[:-1]
    assert not check_log(path).survey.corrupt
    with capture_logs() as logs:
        records = await _all(path)
    assert sorted((r.coordinates, r.value) for r in records) == sorted(expected)
    truncated = [e for e in logs if e["event"] == "embedded_log.torn_tail_truncated"]
    assert len(truncated) == 1
    assert truncated[0]["dropped_bytes"] > 0


async def test_long_reads_let_other_requests_run(tmp_path: Path) -> None:
    """20 concurrent scans of a long partition (as ``/events`` reads it, 1000 records a call) must
    not hold up a small request for their duration: the reads yield to the event loop."""
    path = tmp_path / "events.log"
    log = EmbeddedEventLog.open(path, partitions=1)
    try:
        await asyncio.gather(*(log.append(key=b"t:u:c", value=b"x" * 200) for _ in range(20_000)))
        loop = asyncio.get_running_loop()
        waits: list[float] = []
        done = asyncio.Event()

        async def small_requests() -> None:
            while not done.is_set():
                at = loop.time()
                await asyncio.sleep(0.001)
                waits.append(loop.time() - at)

        async def scan() -> int:
            position, seen = 0, 0
            while position < 20_000:
                records = (await log.read({0: position}, max_records=1000, timeout_s=0)).records
                position, seen = records[-1].offset + 1, seen + len(records)
            return seen

        # What is measured is the reads' yielding, not the collector: late in a full run the heap
        # is large, and one full collection while the scans allocate stalls the loop for 0.3 s.
        gc.collect()
        gc.disable()
        try:
            ticker = asyncio.create_task(small_requests())
            await asyncio.sleep(0.01)
            started = loop.time()
            assert await asyncio.gather(*(scan() for _ in range(20))) == [20_000] * 20
            scanning = loop.time() - started
            done.set()
            await ticker
        finally:
            gc.enable()
        # Without yielding the small request waits for all 20 scans (max wait == scanning).
        assert max(waits) < scanning / 10, (max(waits), scanning)
    finally:
        await log.close()


@pytest.mark.postgres
async def test_a_rebuild_from_a_repaired_log_dead_letters_the_hole_and_projects_the_rest(
    projection: Projection, tmp_path: Path
) -> None:
    path = tmp_path / "events.log"
    log = EmbeddedEventLog.open(path, partitions=2)
    producer = ConversationProducer(log, producer="test")
    keys = [ConversationKey("acme", "u", f"c{i}") for i in range(4)]
    for turn in range(5):
        for key in keys:
            await producer.append_user(key, f"{key.conversation_id} turn {turn}")
    await log.close()
    victim = _frame_starts(path)[9]
    _flip(path, victim + 60)
    [damage] = check_log(path).survey.corrupt
    [(partition, offset)] = damage.offsets
    repair_log(path)

    log = EmbeddedEventLog.open(path, partitions=2)
    try:
        await project_all(log, projection.store())
    finally:
        await log.close()
    letters = await projection.rows('SELECT partition, "offset" FROM {s}.dead_letters')
    assert letters == [(partition, offset)]  # the hole, at the damaged record's own coordinates
    messages = await projection.rows("SELECT count(*) FROM {s}.transcript")
    assert messages == [(19,)]  # every other record
