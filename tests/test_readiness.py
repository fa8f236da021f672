"""``/readyz`` once the projector is gone: not ready, whatever lag figure the last positions
would give, and the report says why."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from convlog.runtime.serve import Service, running_service
from convlog.settings import Settings
from projectors.errors import ProjectionError
from query_api.http import create_app
from tests.projection_support import temporary_database

pytestmark = pytest.mark.postgres


async def crash_the_projector(service: Service) -> tuple[httpx.Response, str]:
    """Ready first; then the read models broken under the running projector (an operator's
    mistake): its next batch fails for good — an undefined table, neither a data error nor an
    outage. The /readyz answer and the metrics once the projector task ended."""
    transport = httpx.ASGITransport(app=create_app(service.deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as client:
        for _ in range(100):
            ready = await client.get("/readyz")
            if ready.status_code == 200:
                break
            await asyncio.sleep(0.1)
        assert ready.status_code == 200, ready.text
        assert ready.json()["lag"] == 0
        async with service.pool.connection() as conn:
            await conn.execute(f"DROP TABLE {service.projector.schema}.transcript CASCADE")
        posted = await client.post(
            "/v1/users/u1/conversations/c/messages",
            json={"role": "user", "content": "hi"},
            headers={"Authorization": "Bearer token-a"},
        )
        assert posted.status_code == 202
        for _ in range(100):
            report = await client.get("/readyz")
            if report.json()["projector"] is False and not service.projector.ready:
                break
            await asyncio.sleep(0.1)
        return report, (await client.get("/metrics")).text


async def test_readyz_is_503_with_the_cause_once_the_projector_task_died(pg_admin_url: str, tmp_path: Path) -> None:
    async with temporary_database(pg_admin_url) as url:
        settings = Settings(
            database_url=url, data_dir=tmp_path, partitions=2, api_tokens="acme:token-a", summarizer="off"
        )
        # Leaving the service re-raises what ended its projector: the crash made above. (So the
        # assertions are made out here: inside, that exception would replace a failed one.)
        with pytest.raises(ProjectionError, match="UndefinedTable"):
            async with running_service(settings) as service:
                report, metrics = await crash_the_projector(service)
    assert report.status_code == 503
    body = report.json()
    assert body["ready"] is False
    assert body["projector"] is False
    assert body["projector_error"].startswith("crashed: ProjectionError")
    assert "UndefinedTable" in body["projector_error"]
    assert body["lag"] is None  # not 0: nothing is projecting, so nothing is caught up
    assert "convlog_projector_ready 0.0" in metrics


async def test_readyz_answers_in_bounded_time_when_the_log_does_not(
    pg_admin_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """During a leader election Kafka holds end offsets back until every partition has a leader:
    /readyz says so within its bound instead of hanging (on every instance at once)."""
    async with temporary_database(pg_admin_url) as url:
        settings = Settings(
            database_url=url, data_dir=tmp_path, partitions=2, api_tokens="acme:token-a", summarizer="off"
        )
        async with running_service(settings) as service:
            released, end_offsets = asyncio.Event(), service.event_log.end_offsets

            async def held_back(partitions: list[int] | None = None) -> dict[int, int]:
                await released.wait()  # the projector of this service asks too: it gets its answer late
                return await end_offsets(partitions)

            monkeypatch.setattr(service.event_log, "end_offsets", held_back)
            transport = httpx.ASGITransport(app=create_app(service.deps))
            async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as client:
                started = asyncio.get_running_loop().time()
                report = await asyncio.wait_for(client.get("/readyz"), 10)
                elapsed = asyncio.get_running_loop().time() - started
            released.set()
            monkeypatch.undo()
    assert elapsed < 5
    assert report.status_code == 503
    assert report.json()["log"] is False
    assert "did not come within" in report.json()["log_error"]
