"""``convlog erase`` as an operator runs it (issue 25, parts 5 and 6), a process of its own beside
a running service on Kafka and Postgres: one conversation, then the whole user, keys destroyed
first; the audit record in the log; a second erase is a no-op answer; an unknown user exits 1;
no ``--yes`` and no terminal refuses; the plain records of a conversation written with sealing
off are counted and called unshreddable; the counters land in a textfile for Prometheus."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from convlog.runtime.serve import Service, running_service
from convlog.settings import Settings
from events.keys import ConversationKey
from query_api.http import create_app
from tests.kafka.ops_support import REPO, ops_env
from tests.projection_support import temporary_database
from tests.support import unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

A = {"Authorization": "Bearer token-a"}
ALICE_1 = ConversationKey("acme", "alice", "c1")
ALICE_2 = ConversationKey("acme", "alice", "c2")
BOB = ConversationKey("acme", "bob", "c3")


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    """``convlog ARGS`` in a process of its own on the service's topic, database and data
    directory (its master key), stdin not a terminal."""
    assert settings.kafka_bootstrap
    assert settings.database_url
    env = ops_env(settings.kafka_bootstrap, settings.database_url, settings.topic, settings.data_dir)
    return subprocess.run(
        [sys.executable, "-m", "convlog.cli.main", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(_cli, settings, *args)


@pytest.fixture
async def client(kafka_service: tuple[Service, Settings]) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(kafka_service[0].deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as c:
        yield c


def _path(key: ConversationKey, what: str) -> str:
    return f"/v1/users/{key.user_id}/conversations/{key.conversation_id}/{what}"


async def messages(client: httpx.AsyncClient, key: ConversationKey) -> list[dict[str, Any]]:
    answer = await client.get(_path(key, "messages"), headers=A)
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["messages"]
    return found


async def until_erased(client: httpx.AsyncClient, key: ConversationKey) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while True:
        rows = await messages(client, key)
        if rows and all(m["erased_at"] for m in rows):
            return rows
        assert time.monotonic() < deadline, f"{key} was not erased in the read models in time"
        await asyncio.sleep(0.1)


async def projected(service: Service, partition: int, offset: int) -> None:
    deadline = time.monotonic() + 30
    while service.projector is not None and service.projector.positions.get(partition, 0) <= offset:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


async def erase_events(client: httpx.AsyncClient, key: ConversationKey) -> list[dict[str, Any]]:
    answer = await client.get(_path(key, "events"), headers=A)
    assert answer.status_code == 200, answer.text
    return [e for e in answer.json()["events"] if e["event_type"] == "ConversationErased"]


def metric(text: str, name: str) -> float:
    [value] = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + " ")]
    return value


async def test_an_operator_erases_a_conversation_then_the_user_and_the_log_keeps_who_asked(
    kafka_service: tuple[Service, Settings], client: httpx.AsyncClient, tmp_path: Path
) -> None:
    service, settings = kafka_service
    producer = service.deps.producer
    for key in (ALICE_1, ALICE_2, BOB):
        await producer.append_user(key, f"secret of {key.conversation_id}")
        last = await producer.append_assistant(key, f"answer in {key.conversation_id}", finish_reason="stop")
        await projected(service, last.partition, last.offset)
    prom = tmp_path / "erase.prom"
    common = ("--tenant", "acme", "--user", "alice", "--by", "dpo@acme", "--metrics-file", str(prom))

    # No --yes, and stdin is no terminal to ask on: what would go is shown, nothing is erased.
    refused = await cli(settings, "erase", *common, "--conversation", "c1")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "keys to destroy: 1" in refused.stdout
    assert "--yes" in refused.stderr
    assert not await erase_events(client, ALICE_1)
    assert not prom.exists()

    one = await cli(settings, "erase", *common, "--conversation", "c1", "--reason", "art. 17 ticket 42", "--yes")
    assert one.returncode == 0, one.stdout + one.stderr
    assert "erased conversation acme:alice:c1: 1 conversation(s), 1 key(s) destroyed" in one.stdout
    assert "plain record" not in one.stdout  # sealed throughout: nothing the log keeps readable
    assert all(m["content"] is None for m in await until_erased(client, ALICE_1))
    # The user's other conversation is still served, whole.
    assert [m["content"] for m in await messages(client, ALICE_2)] == ["secret of c2", "answer in c2"]
    [audit] = await erase_events(client, ALICE_1)
    assert audit["body"]["subject"] == "conversation"
    assert audit["body"]["requested_by"] == "dpo@acme"
    assert audit["body"]["reason"] == "art. 17 ticket 42"

    again = await cli(settings, "erase", *common, "--conversation", "c1", "--yes")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already erased" in again.stdout
    assert len(await erase_events(client, ALICE_1)) == 1  # a no-op: not even another event

    user = await cli(settings, "erase", *common, "--yes")
    assert user.returncode == 0, user.stdout + user.stderr
    # c1 too (its erase is recorded again as the user's); the user key and c2's key destroyed.
    assert "erased user 'alice' of tenant 'acme': 2 conversation(s), 2 key(s) destroyed" in user.stdout
    assert all(m["content"] is None for m in await until_erased(client, ALICE_2))
    assert [m["content"] for m in await messages(client, BOB)] == ["secret of c3", "answer in c3"]
    printed = await cli(settings, "events", str(ALICE_2))
    assert printed.returncode == 0, printed.stderr
    assert re.search(r"erased .*\[subject=user; by=dpo@acme; at=\d{4}-", printed.stdout), printed.stdout
    assert "secret of c2" not in printed.stdout
    assert "already erased" in (await cli(settings, "erase", *common, "--yes")).stdout

    counted = prom.read_text()
    assert metric(counted, 'convlog_erasures_total{subject="conversation"}') == 1
    assert metric(counted, 'convlog_erasures_total{subject="user"}') == 1
    assert metric(counted, "convlog_keys_destroyed_total") == 3

    unknown = await cli(settings, "erase", "--tenant", "acme", "--user", "nobody", "--yes")
    assert unknown.returncode == 1
    assert "no such user" in unknown.stderr
    unknown = await cli(settings, "erase", "--tenant", "acme", "--user", "bob", "--conversation", "c9", "--yes")
    assert unknown.returncode == 1
    assert "no such conversation" in unknown.stderr
    keys = await cli(settings, "keys", "list", "--json")
    listed = [json.loads(line) for line in keys.stdout.splitlines()]
    assert {k["user_id"] for k in listed if k["destroyed_at"]} == {"alice"}
    assert {k["requested_by"] for k in listed if k["destroyed_at"]} == {"dpo@acme"}


async def test_the_plain_records_of_a_conversation_written_before_sealing_are_counted_and_called_unshreddable(
    kafka_bootstrap: str, pg_admin_url: str, tmp_path: Path
) -> None:
    key = ConversationKey("acme", "carol", "old")
    async with temporary_database(pg_admin_url) as url:
        plain_settings = Settings(
            kafka_bootstrap=kafka_bootstrap,
            topic=unique_topic("erase"),
            database_url=url,
            data_dir=tmp_path,
            partitions=4,
            api_tokens="acme:token-a",
            summarizer="off",
            sealing=False,
        )
        async with running_service(plain_settings) as plain:
            await plain.deps.producer.append_user(key, "written before sealing")
            await plain.deps.producer.append_assistant(key, "so was this", finish_reason="stop")
            last = await plain.deps.producer.append_user(key, "and this")
            await projected(plain, last.partition, last.offset)
        # The deployment upgraded to sealing (the default) adds a sealed message: keyed, not plain.
        settings = plain_settings.model_copy(update={"sealing": True})
        async with running_service(settings) as sealed:
            last = await sealed.deps.producer.append_assistant(key, "sealed at last", finish_reason="stop")
            await projected(sealed, last.partition, last.offset)
            carol = ("--tenant", "acme", "--user", "carol")
            erased = await cli(settings, "erase", *carol, "--conversation", "old", "--yes")
            assert erased.returncode == 0, erased.stdout + erased.stderr
            assert "1 conversation(s), 1 key(s) destroyed" in erased.stdout
            assert "3 plain record(s) of this subject (3 message(s), 0 summary(ies))" in erased.stdout
            assert "the log keeps them readable" in erased.stdout
            assert "docs/erasure.md#plain-records" in erased.stdout
            transport = httpx.ASGITransport(app=create_app(sealed.deps))
            async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as client:
                # The read models serve none of it; the count still tells what the log keeps.
                assert all(m["content"] is None for m in await until_erased(client, key))
            again = await cli(settings, "erase", *carol, "--conversation", "old", "--yes")
            assert "already erased" in again.stdout
            assert "3 plain record(s)" in again.stdout
