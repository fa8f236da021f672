"""What clients see when the log fails under the API: a log that lost records the read models hold,
and a full disk. Embedded log, real Postgres, the whole service in-process."""

from __future__ import annotations

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

    async with temporary_database(pg_admin_url) as url:
        settings = Settings(database_url=url, data_dir=tmp_path, partitions=4, **SERVICE)
        async with running_service(settings) as service, _client(service) as client:
            first = (await _say(client, "before the disk filled up")).json()
            size = settings.embedded_log_path.stat().st_size
            monkeypatch.setattr(os, "pwrite", pwrite)
            refused = await _say(client, "while the disk is full")
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["code"] == "log_storage_full"
            assert refused.headers["Retry-After"] == "1"
            assert str(tmp_path) not in refused.text
            assert ".log" not in refused.text
            assert settings.embedded_log_path.stat().st_size == size  # the half frame was cut off again

            full = False  # space freed: no restart needed
            later = await _say(client, "after space was freed")
            assert later.status_code == 202, later.text
            assert later.json()["offset"] == first["offset"] + 1
            answer = await _context(client, later.json()["offset"])
            assert answer.status_code == 200
            texts = [m["content"] for m in answer.json()["messages"]]
            assert texts == ["before the disk filled up", "after space was freed"]
    assert check_log(settings.embedded_log_path).healthy
