"""A full disk under the embedded log, for real: the file-size limit (RLIMIT_FSIZE, SIGXFSZ
ignored) makes the kernel refuse writes past it with EFBIG, as a full disk does with ENOSPC."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from events.embedded_log import EmbeddedEventLog
from events.embedded_log_repair import check_log
from events.errors import LogError

SCRIPT = r"""
import asyncio, json, resource, signal, sys
from pathlib import Path
from events.embedded_log import EmbeddedEventLog
from events.errors import LogStorageFullError

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # else the kernel kills the process instead of failing the write

async def main(path):
    log = EmbeddedEventLog.open(Path(path), partitions=1)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (Path(path).stat().st_size + 20_000, hard))
    acked, refusals = {}, []
    for wave in range(20):  # concurrent appends: group commits that straddle the limit
        values = [f"w{wave}-{i}-".encode() + b"x" * 300 for i in range(10)]
        results = await asyncio.gather(*(log.append(key=b"t:u:c", value=v) for v in values), return_exceptions=True)
        for value, result in zip(values, results):
            if isinstance(result, LogStorageFullError):
                refusals.append([str(result), result.retriable, result.code])
            elif isinstance(result, BaseException):
                raise result
            else:
                acked[result.offset] = value.decode()
    size_when_full = Path(path).stat().st_size
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # space freed
    after = await log.append(key=b"t:u:c", value=b"after")
    acked[after.offset] = "after"
    await log.close()
    print(json.dumps({"acked": acked, "refusals": refusals, "size_when_full": size_when_full}))

asyncio.run(main(sys.argv[1]))
"""


async def test_a_full_disk_refuses_appends_without_damage_and_they_resume(tmp_path: Path) -> None:
    path = tmp_path / "events.log"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).parent.parent,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    refusals = result["refusals"]
    assert refusals, "the limit was never reached"
    for message, retriable, code in refusals:
        assert retriable
        assert code == "log_storage_full"
        assert str(tmp_path) not in message
    assert result["size_when_full"] <= path.stat().st_size

    acked = {int(offset): value for offset, value in result["acked"].items()}
    assert sorted(acked) == list(range(len(acked)))  # dense: a refused append took no offset
    assert check_log(path).healthy
    log = EmbeddedEventLog.open(path, partitions=1)
    try:
        records = (await log.read({0: 0}, max_records=10_000, timeout_s=0)).records
        assert {r.offset: r.value.decode() for r in records} == acked  # exactly the acknowledged records
    finally:
        await log.close()


async def test_a_failed_write_other_than_a_full_disk_stops_the_log_without_naming_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "events.log"
    log = EmbeddedEventLog.open(path, partitions=1)
    await log.append(key=b"t:u:c", value=b"kept")

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fdatasync", broken)
    with pytest.raises(LogError, match=r"\(EIO\)") as failed:
        await log.append(key=b"t:u:c", value=b"lost")
    assert not failed.value.retriable
    with pytest.raises(LogError, match="stopped after a failed write") as later:
        await log.append(key=b"t:u:c", value=b"refused")
    for error in (failed.value, later.value):
        assert str(tmp_path) not in str(error)
    monkeypatch.undo()
    await log.close()  # releases the file: it opens again
    reopened = EmbeddedEventLog.open(path, partitions=1)
    await reopened.close()
