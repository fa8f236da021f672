"""Turning sealing off (``CONVLOG_SEALING=false``) after it was on: new records enter the log
plain, and what was sealed before is still served, and still shredded by an erase — the key
store is opened either way (docs/configuration.md). On the embedded log and real Postgres."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from convlog.runtime.serve import Service, running_service
from convlog.settings import Settings
from query_api.http import create_app
from tests.projection_support import temporary_database
from tests.test_api import BASE, A, caught_up, post

pytestmark = pytest.mark.postgres
CONTEXT = {"model": "gpt-4o", "budget_tokens": 10_000}


@asynccontextmanager
async def client_of(url: str, data_dir: Path, *, sealing: bool) -> AsyncIterator[tuple[Service, httpx.AsyncClient]]:
    settings = Settings(
        database_url=url, data_dir=data_dir, partitions=2, api_tokens="acme:token-a", summarizer="off", sealing=sealing
    )
    async with running_service(settings) as service:
        transport = httpx.ASGITransport(app=create_app(service.deps))
        async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as client:
            yield service, client


def log_bytes(data_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in data_dir.rglob("*") if p.is_file() and "key" not in p.name)


async def contents(client: httpx.AsyncClient, conversation: str) -> list[object]:
    answer = await client.get(f"{BASE}/{conversation}/context", params=CONTEXT, headers=A)
    assert answer.status_code == 200, answer.text
    return [m["content"] for m in answer.json()["messages"]]


async def test_what_was_sealed_stays_served_and_erasable_once_sealing_is_off(pg_admin_url: str, tmp_path: Path) -> None:
    async with temporary_database(pg_admin_url) as url:
        async with client_of(url, tmp_path, sealing=True) as (_, client):
            written = await post(client, "c", {"role": "user", "content": "sealed-marker-0451"})
            await caught_up(client, "c", written["offset"])
        assert b"sealed-marker-0451" not in log_bytes(tmp_path)

        async with client_of(url, tmp_path, sealing=False) as (service, client):
            assert not service.deps.producer.seals
            written = await post(client, "c", {"role": "user", "content": "plain-marker-0452"})
            await caught_up(client, "c", written["offset"])
            assert await contents(client, "c") == ["sealed-marker-0451", "plain-marker-0452"]
            assert b"plain-marker-0452" in log_bytes(tmp_path)  # plain: what sealing off means
            refused = await client.post(f"{BASE}/c/key", headers=A)
            assert refused.status_code == 409
            assert refused.json()["error"]["code"] == "sealing_off"

            erased = await client.delete(f"{BASE}/c", headers=A)
            assert erased.status_code == 202, erased.text
            events = await client.get(f"{BASE}/c/events", headers=A)
            assert events.status_code == 200
            assert "sealed-marker-0451" not in events.text  # its key destroyed by the erase
