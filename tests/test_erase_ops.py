"""Erasure as operators see it on the embedded defaults (issue 25, part 5): the API's erase
answers say which keys went and whether it was erased already, /metrics counts erasures and
destroyed keys, and ``convlog erase`` refuses while a running ``convlog serve`` holds the
embedded log — before any key is destroyed — and erases once it is stopped, the audit record
in the log."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import httpx
import pytest

from convlog.runtime.serve import Service, running_service
from convlog.settings import Settings
from events.keys import ConversationKey
from query_api.http import create_app
from tests.projection_support import temporary_database
from tests.support import convlog_cli

pytestmark = pytest.mark.postgres

A = {"Authorization": "Bearer token-a"}
BASE = "/v1/users/u1/conversations"


def metric(text: str, name: str) -> float:
    [value] = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " ")]
    return value


async def counters(http_client: httpx.AsyncClient) -> tuple[float, float, float]:
    text = (await http_client.get("/metrics")).text
    return (
        metric(text, 'convlog_erasures_total{subject="conversation"}'),
        metric(text, 'convlog_erasures_total{subject="user"}'),
        metric(text, "convlog_keys_destroyed_total"),
    )


async def test_erase_answers_the_keys_destroyed_and_already_and_metrics_count_them(
    http_client: httpx.AsyncClient,
) -> None:
    for conversation in ("one", "two", "three"):
        posted = await http_client.post(
            f"{BASE}/{conversation}/messages", json={"role": "user", "content": "hi"}, headers=A
        )
        assert posted.status_code == 202, posted.text
    assert await counters(http_client) == (0, 0, 0)

    first = await http_client.delete(f"{BASE}/one", headers=A)
    assert first.status_code == 202, first.text
    assert first.json()["destroyed_keys"] == 1
    assert first.json()["already"] is False
    assert {"event_id", "partition", "offset"} <= first.json().keys()
    assert await counters(http_client) == (1, 0, 1)

    again = await http_client.delete(f"{BASE}/one", headers=A)
    assert again.status_code == 202, again.text
    assert (again.json()["destroyed_keys"], again.json()["already"]) == (0, True)
    assert await counters(http_client) == (1, 0, 1)  # erasing twice erased nothing more

    user = await http_client.delete("/v1/users/u1", headers=A)
    assert user.status_code == 202, user.text
    assert user.json()["destroyed_keys"] == 3  # the user key, two's and three's
    assert await counters(http_client) == (1, 1, 4)
    assert (await http_client.delete("/v1/users/u1", headers=A)).json()["already"] is True
    assert await counters(http_client) == (1, 1, 4)


def _cli_env(url: str, data_dir: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "CONVLOG_DATABASE_URL": url,
        "CONVLOG_DATA_DIR": str(data_dir),
        "CONVLOG_PARTITIONS": "4",
        "CONVLOG_LOG_LEVEL": "warning",
    }
    env.pop("CONVLOG_KAFKA_BOOTSTRAP", None)
    return env


async def _projected(service: Service, partition: int, offset: int) -> None:
    deadline = time.monotonic() + 20
    while service.projector is not None and service.projector.positions.get(partition, 0) <= offset:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


async def test_convlog_erase_refuses_beside_serve_on_the_embedded_log_and_erases_once_it_stopped(
    pg_admin_url: str, tmp_path: Path
) -> None:
    key = ConversationKey("acme", "u1", "embedded")
    async with temporary_database(pg_admin_url) as url:
        env = _cli_env(url, tmp_path)
        erase = ("erase", "--tenant", "acme", "--user", "u1", "--conversation", "embedded", "--by", "ops@acme", "--yes")
        settings = Settings(
            database_url=url, data_dir=tmp_path, partitions=4, summarizer="off", api_tokens="acme:token-a"
        )
        async with running_service(settings) as service:
            await service.deps.producer.append_user(key, "held by serve")
            last = await service.deps.producer.append_assistant(key, "indeed", finish_reason="stop")
            await _projected(service, last.partition, last.offset)
            refused = await asyncio.to_thread(convlog_cli, env, *erase)
            assert refused.returncode == 2, refused.stdout + refused.stderr
            assert "open in another process" in refused.stderr
            assert "stop `convlog serve` first" in refused.stderr
            keys = await asyncio.to_thread(convlog_cli, env, "keys", "list", "--json")
            assert keys.returncode == 0, keys.stderr
            assert all(json.loads(line)["destroyed_at"] is None for line in keys.stdout.splitlines())
        done = await asyncio.to_thread(convlog_cli, env, *erase)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 conversation(s), 1 key(s) destroyed" in done.stdout
        printed = await asyncio.to_thread(convlog_cli, env, "events", str(key))
        assert printed.returncode == 0, printed.stderr
        assert "held by serve" not in printed.stdout
        assert "[subject=conversation; by=ops@acme; at=" in printed.stdout
        async with running_service(settings) as service:  # the projection applies the erase
            transport = httpx.ASGITransport(app=create_app(service.deps))
            async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as client:
                deadline = time.monotonic() + 20
                while True:
                    rows = (await client.get(f"{BASE}/embedded/messages", headers=A)).json()["messages"]
                    if rows and all(r["erased_at"] for r in rows):
                        break
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.1)
                assert [r["content"] for r in rows] == [None, None]
        again = await asyncio.to_thread(convlog_cli, env, *erase)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "already erased" in again.stdout
