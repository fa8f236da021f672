"""What clients see when the log fails under the API: a log that lost records the read models hold,
and a full disk. Embedded log, real Postgres, the whole service in-process."""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from convlog.runtime.serve import Service, running_service
from convlog.settings import Settings
from events.embedded_log_repair import check_log
from events.errors import LogError
from projectors.errors import PositionBeyondLogEndError
from query_api.http import create_app
from tests.projection_support import temporary_database

pytestmark = pytest.mark.postgres

A = {"Authorization": "Bearer token-a"}
URL = "/v1/users/u1/conversations/c"
SERVICE = {"api_tokens": "acme:token-a", "summarizer": "off"}


@asynccontextmanager
async def _client(service: Service) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(service.deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as c:
        yield c


async def _say(client: httpx.AsyncClient, text: str) -> httpx.Response:
    return await client.post(f"{URL}/messages", json={"role": "user", "content": text}, headers=A)


async def _ready(client: httpx.AsyncClient) -> bool:
    """Whether /readyz says ready within a few seconds (the projector starts with the service)."""
    for _ in range(100):
        if (await client.get("/readyz")).status_code == 200:
            return True
        await asyncio.sleep(0.05)
    return False


async def _context(client: httpx.AsyncClient, min_offset: int) -> httpx.Response:
    return await client.get(f"{URL}/context?model=gpt-4o&budget_tokens=4000&min_offset={min_offset}", headers=A)


async def test_appends_are_refused_while_the_read_models_are_ahead_of_the_log(
    pg_admin_url: str, tmp_path: Path
) -> None:
    async with temporary_database(pg_admin_url) as url:
        settings = Settings(database_url=url, data_dir=tmp_path, partitions=4, **SERVICE)
        async with running_service(settings) as service, _client(service) as client:
            sent = [(await _say(client, f"message {i}")).json() for i in range(3)]
            lost = sent[-1]["offset"]
            assert (await _context(client, lost)).status_code == 200
        log_file = settings.embedded_log_path
        os.truncate(log_file, log_file.stat().st_size - 3)  # a kill took the tail: the last record is gone

        seen: dict[str, Any] = {}
        with pytest.raises(PositionBeyondLogEndError):  # the projector refuses to start, as before
            await _serve_once(settings, lost, seen)
        refused, stale, ready = seen["append"], seen["context"], seen["readyz"]
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "log_behind_read_models"
        assert "rebuild" in refused.json()["error"]["message"]
        assert int(refused.headers["Retry-After"]) > 0
        assert str(tmp_path) not in refused.text
        assert stale.status_code == 503, stale.text  # the lost record is not in this log: never a 200
        assert stale.json()["error"]["code"] == "log_behind_read_models"
        assert ready.status_code == 503
        assert "log_behind_read_models" in ready.json()
        assert seen["end"][sent[-1]["partition"]] == lost  # nothing was appended at the lost offset


async def _serve_once(settings: Settings, lost: int, seen: dict[str, Any]) -> None:
    async with running_service(settings) as service, _client(service) as client:
        seen["append"] = await _say(client, "the next message would take the lost offset")
        seen["context"] = await _context(client, lost)
        seen["readyz"] = await client.get("/readyz")
        seen["end"] = await service.event_log.end_offsets()


async def test_a_full_disk_answers_503_and_appends_resume_once_there_is_space(
    pg_admin_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_pwrite = os.pwrite
    full = True

    def pwrite(fd: int, data: Any, position: int) -> int:
        if not full:
            return real_pwrite(fd, data, position)
        real_pwrite(fd, bytes(data)[: len(data) // 2], position)  # half a frame reaches the file
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    real_fallocate = os.posix_fallocate

    def fallocate(fd: int, offset: int, length: int) -> None:
        if full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fallocate(fd, offset, length)

    async with temporary_database(pg_admin_url) as url:
        settings = Settings(database_url=url, data_dir=tmp_path, partitions=4, **SERVICE)
        async with running_service(settings) as service, _client(service) as client:
            first = (await _say(client, "before the disk filled up")).json()
            size = settings.embedded_log_path.stat().st_size
            monkeypatch.setattr(os, "pwrite", pwrite)
            monkeypatch.setattr(os, "posix_fallocate", fallocate)
            assert await _ready(client)
            refused = await _say(client, "while the disk is full")
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "log_storage_full"
            assert refused.headers["Retry-After"] == "1"
            assert str(tmp_path) not in refused.text
            assert ".log" not in refused.text
            assert settings.embedded_log_path.stat().st_size == size  # the half frame was cut off again
            # An instance that cannot take appends is not ready; it is still alive (space may come).
            unready = await client.get("/readyz")
            assert unready.status_code == 503, unready.text
            assert (unready.json()["log"], unready.json()["log_error"]) == (False, "the log's disk is full (ENOSPC)")
            assert (await client.get("/readyz")).status_code == 503  # asked again: still no room
            assert (await client.get("/healthz")).status_code == 200

            full = False  # space freed: no restart needed
            assert await _ready(client)  # before any append tried
            assert settings.embedded_log_path.stat().st_size == size  # the probe took no room
            later = await _say(client, "after space was freed")
            assert later.status_code == 202, later.text
            assert later.json()["offset"] == first["offset"] + 1
            answer = await _context(client, later.json()["offset"])
            assert answer.status_code == 200
            texts = [m["content"] for m in answer.json()["messages"]]
            assert texts == ["before the disk filled up", "after space was freed"]
    assert check_log(settings.embedded_log_path).healthy


async def test_a_log_stopped_by_a_failed_write_is_not_alive(
    pg_admin_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EIO on the embedded log's fsync stops it for good (its tail is unknown): only a restart,
    which reopens the file, helps. /healthz says so (a supervisor restarts the process), and
    /readyz too; before, /healthz stayed 200 and the process lingered, refusing every append."""
    seen: dict[str, httpx.Response] = {}
    async with temporary_database(pg_admin_url) as url:
        settings = Settings(database_url=url, data_dir=tmp_path, partitions=4, **SERVICE)
        with pytest.raises(LogError, match=r"stopped after a failed write \(EIO\)"):  # the projector's, at the exit
            await _until_the_log_fails(settings, seen, monkeypatch)
    assert seen["healthy"].json() == {"status": "ok"}
    assert seen["failed"].status_code >= 500
    health = seen["health"]
    assert health.status_code == 503, health.text
    assert health.json() == {"status": "failed", "error": "the embedded log stopped after a failed write (EIO)"}
    assert str(tmp_path) not in health.text
    ready = seen["ready"]
    assert ready.status_code == 503
    assert ready.json()["log_error"] == "the embedded log stopped after a failed write (EIO): see the server log"


async def _until_the_log_fails(
    settings: Settings, seen: dict[str, httpx.Response], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answers in ``seen``: the service's exit raises the projector's error (it read the log)."""

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    async with running_service(settings) as service, _client(service) as client:
        assert (await _say(client, "kept")).status_code == 202
        seen["healthy"] = await client.get("/healthz")
        monkeypatch.setattr(os, "fdatasync", broken)
        seen["failed"] = await _say(client, "lost")
        monkeypatch.undo()
        seen["health"] = await client.get("/healthz")
        for _ in range(100):  # the projector reads the log too: it stops, and says so
            seen["ready"] = await client.get("/readyz")
            if "projector_error" in seen["ready"].json():
                break
            await asyncio.sleep(0.05)
