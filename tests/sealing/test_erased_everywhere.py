"""Erased means gone (issue 25, Done means): a user with two conversations writes a marker in
every content field (tests/sealing/marked_turns.py), another user writes beside them, and the
summarizer (the fake model) records a marked summary. Then the raw bytes of every copy an
attacker could take — the log (the Kafka topic's and keys topic's segment directories on every
broker, or the embedded log's data directory with its keys file), the Postgres data directory
with its WAL (after a CHECKPOINT), a retention archive (the sealed rows as retention writes
them) and the key store — hold none of the markers in plain, hex or base64 form, before the
erase (content never lands in clear) and after ``DELETE /v1/users/{user_id}``; and the erased
user's wrapped keys are gone from the key store (the file at once; the keys topic once its
cleaner compacted it, ≤ 90 s with a 1 s compaction lag).

The positive control, without which the scans would prove nothing: the same scanner finds the
marker of a conversation written by a second service with sealing off in its log, in the data
directory and in its archive, and the wrapped keys in the key store before the erase."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from convlog.jobs.export import ExportFilter, export_transcripts
from convlog.runtime.serve import Service, running_service
from convlog.settings import Settings
from events.keys import ConversationKey
from events.sealing.file_keys import FileKeyRecordLog
from events.sealing.kafka_keys import KafkaKeyRecordLog
from events.sealing.ports import KeyRecordLog
from query_api.http import create_app
from tests.fake_llm import FakeLLM
from tests.projection_support import temporary_database
from tests.sealing import marked_turns as turns
from tests.sealing.disk_scan import (
    Markers,
    forms,
    kafka_log_dirs,
    needles_of,
    postgres_data_directory,
    scan,
    topic_dirs,
)
from tests.support import unique_topic

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TOKEN = "token-a"  # noqa: S105 -- the test services' app token, of tenant acme
ALICE = [ConversationKey("acme", "alice", "c1"), ConversationKey("acme", "alice", "c2")]
BOB = [ConversationKey("acme", "bob", "c1")]
CAROL = [ConversationKey("acme", "carol", "c1")]  # the control, written with sealing off
COMPACTION_WAIT_S = 90.0


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def backend(request: pytest.FixtureRequest) -> str | None:
    """The log's backend: the embedded log (None) or the Kafka bootstrap."""
    if request.param == "embedded":
        return None
    bootstrap: str = request.getfixturevalue("kafka_bootstrap")
    return bootstrap


@asynccontextmanager
async def service(
    pg_admin_url: str, data_dir: Path, bootstrap: str | None, **fields: Any
) -> AsyncIterator[tuple[Service, Settings, httpx.AsyncClient]]:
    """A whole service (API, projector, maybe the summarizer) on a fresh database and its own
    topic or data directory, with an in-process client of its API."""
    defaults: dict[str, Any] = {"partitions": 2, "api_tokens": f"acme:{TOKEN}", "summarizer": "off"}
    fields = defaults | {"version_poll_s": 0.2} | fields
    if bootstrap is not None:
        fields |= {"kafka_bootstrap": bootstrap, "topic": unique_topic("erased")}
    async with temporary_database(pg_admin_url) as url:
        settings = Settings(database_url=url, data_dir=data_dir, **fields)
        async with running_service(settings) as svc:
            transport = httpx.ASGITransport(app=create_app(svc.deps))
            async with httpx.AsyncClient(transport=transport, base_url="http://convlog", timeout=60) as client:
                yield svc, settings, client


async def log_copies(settings: Settings) -> list[Path]:
    """Where the log and its keys are on disk: the topic's and the keys topic's partition
    directories on every broker, or the embedded data directory (log file, keys file)."""
    if settings.kafka_bootstrap is None:
        return [settings.data_dir]
    dirs = topic_dirs(await kafka_log_dirs(settings.kafka_bootstrap), settings.topic)
    expected = {f"{settings.topic}-{p}" for p in range(settings.partitions)}
    if settings.sealing:
        expected.add(f"{settings.keys_topic_name}-0")
    assert {d.name for d in dirs} >= expected, dirs
    return dirs


async def key_records(settings: Settings) -> KeyRecordLog:
    if settings.kafka_bootstrap is None:
        return FileKeyRecordLog(settings.keys_file_path, read_only=True)
    return await KafkaKeyRecordLog.connect(
        bootstrap=settings.kafka_bootstrap, topic=settings.keys_topic_name, timeout_s=20
    )


async def wrapped_keys(settings: Settings, user_id: str) -> list[str]:
    """The base64 ``wrapped`` of every key record of ``user_id`` that holds one."""
    records = await key_records(settings)
    try:
        documents = [json.loads(r.value) for r in await records.load()]
    finally:
        await records.close()
    return [d["wrapped"] for d in documents if d.get("user_id") == user_id and d.get("wrapped")]


def wrapped_needles(wrapped: list[str]) -> dict[str, list[bytes]]:
    """A wrapped key as its record holds it (base64 text, itself base64'd in the keys file) and
    as raw bytes."""
    return {f"wrapped {w[:8]}": [*forms(w), *forms(base64.b64decode(w))] for w in wrapped}


async def archive(svc: Service, path: Path) -> Path:
    """The archive ``convlog retention --archive`` writes of these conversations (their rows as
    stored: sealed ones sealed)."""
    assert svc.projector is not None
    assert svc.projector.schema is not None
    with path.open("w", encoding="utf-8") as out:
        written = await export_transcripts(
            svc.pool, svc.projector.schema, ExportFilter(tenant=None), out, progress=False, keep_sealed=True
        )
    assert written > 0
    return path


async def opened_export(svc: Service) -> str:
    """``convlog export``: the transcripts opened with the key store (what an auditor reads)."""
    assert svc.projector is not None
    assert svc.projector.schema is not None
    out = io.StringIO()
    keys = svc.deps.producer.keys
    where = ExportFilter(tenant="acme")
    await export_transcripts(svc.pool, svc.projector.schema, where, out, progress=False, keys=keys)
    return out.getvalue()


async def write_control(pg_admin_url: str, tmp_path: Path, bootstrap: str | None, carol: Markers) -> list[Path]:
    """A second service with sealing off writes CAROL's conversation: where it lands in clear
    (its log, its archive) — the scanner must find it there, and in Postgres' files."""
    async with service(pg_admin_url, tmp_path / "control", bootstrap, sealing=False) as (svc, settings, client):
        last = await turns.write_user(svc, client, TOKEN, CAROL, carol)
        await turns.caught_up(client, TOKEN, CAROL[0], last)
        return [*await log_copies(settings), await archive(svc, tmp_path / "control-archive.jsonl")]


async def test_erased_everywhere(backend: str | None, pg_admin_url: str, tmp_path: Path, fake_llm: FakeLLM) -> None:
    alice, bob, carol = Markers("alice"), Markers("bob"), Markers("carol")
    control_copies = await write_control(pg_admin_url, tmp_path, backend, carol)
    turns.summarize_with_markers(fake_llm, alice, bob)
    summarizing = {
        "summarizer": "on",
        "llm_base_url": fake_llm.base_url,
        "llm_api_key": "test",
        "llm_max_retries": 0,
        "window_max_turns": 2,
        "window_keep_turns": 1,
        "keys_compaction_lag_s": 1,
    }
    async with service(pg_admin_url, tmp_path / "sealed", backend, **summarizing) as (svc, settings, client):
        for user, m in ((ALICE, alice), (BOB, bob)):
            await turns.write_user(svc, client, TOKEN, user, m)
            for key in user:
                await turns.summarized(client, TOKEN, key, m)
        sealed_archive = await archive(svc, tmp_path / "archive.jsonl")
        copies = [*await log_copies(settings), sealed_archive]
        pgdata = await postgres_data_directory(svc.pool)

        # Before the erase: nothing of alice's or bob's in clear anywhere, carol's found where written.
        hits = scan([*copies, pgdata], needles_of(alice, bob))
        assert hits == [], "\n".join(map(str, hits))
        control = scan([*control_copies, pgdata], needles_of(carol))
        *control_log, control_archive = control_copies
        assert any(h.path == str(control_archive) for h in control), "the plain archive holds carol's content"
        assert any(h.path.startswith(str(pgdata)) for h in control), "Postgres' files hold carol's content"
        assert any(h.path.startswith(tuple(map(str, control_log))) for h in control), "the plain log holds it"
        served = await opened_export(svc)
        assert [alice(t) in served for t in ("ct", "tr", "th", "ec")] == [True] * 4  # written, sealed, opened
        wrapped = await wrapped_keys(settings, "alice")
        assert wrapped, "alice's keys hold wrapped bytes"
        assert scan(copies[:-1], wrapped_needles(wrapped)), "the scanner finds the wrapped keys in the key store"

        erase = await client.delete("/v1/users/alice", headers=turns.headers(TOKEN))
        assert erase.status_code == 202, erase.text
        assert erase.json()["destroyed_keys"] == 3  # alice's user key and her two conversation keys
        for done, key in zip(erase.json()["erased_conversations"], ALICE, strict=True):
            await turns.caught_up(client, TOKEN, key, done["offset"])

        # After it: still nothing in clear; alice's wrapped keys gone from the key store.
        pgdata = await postgres_data_directory(svc.pool)
        hits = scan([*copies, pgdata], needles_of(alice, bob))
        assert hits == [], "\n".join(map(str, hits))
        await wrapped_keys_gone(settings, client, copies[:-1], wrapped)
        exported = await opened_export(svc)
        assert alice.prefix not in exported  # an auditor's export opens bob's, and shows alice's erased
        assert bob("ct") in exported


async def wrapped_keys_gone(
    settings: Settings, client: httpx.AsyncClient, key_store: list[Path], wrapped: list[str]
) -> None:
    """The keys file holds no destroyed key's bytes once the erase answered; the keys topic once
    its cleaner compacted the segment that held them — which Kafka rolls only when a record is
    appended after ``segment.ms`` (here 1 s): a key created after that (a new conversation's)
    rolls it, the cleaner (``log.cleaner.backoff.ms``, 15 s) compacts it, and the old segment
    files are deleted ``file.delete.delay.ms`` (the 1 s lag, as convlog sets it) later."""
    needles = wrapped_needles(wrapped)
    if settings.kafka_bootstrap is None:
        hits = scan(key_store, needles)
        assert hits == [], "\n".join(map(str, hits))
        return
    deadline = time.monotonic() + COMPACTION_WAIT_S
    await asyncio.sleep(1.5)  # past segment.ms: the next append rolls the keys topic's segment
    await turns.post(client, TOKEN, ConversationKey("acme", "bob", "after-the-erase"), {"role": "user", "content": "x"})
    while hits := scan(key_store, needles):
        assert time.monotonic() < deadline, "still in the keys topic:\n" + "\n".join(map(str, hits))
        await asyncio.sleep(1.0)
