"""The Java example producer with the settings Spring Kafka and Kafka Streams apps really use:
``transactional.id`` (each turn one transaction; one run also aborts a follow-up turn, so its
partition ends with an abort marker) and every ``compression.type`` (lz4, zstd, snappy, gzip).
Checked through convlog's service as a user sees it: projections exact, only committed events,
every read finishes, lag 0 in ``convlog positions``, no dead letters (docs/producers.md,
"Producer settings")."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from convlog.runtime.serve import Service
from convlog.settings import Settings
from events.keys import ConversationKey, partition_for_key
from query_api.http import create_app
from tests.java_example import TURN_CONTEXT, TURN_TITLE, VERIFIED_CODECS, run_example
from tests.kafka.ops_support import REPO, ops_env
from tests.kafka.transactional import keys_on_distinct_partitions

PARTITIONS = 12
pytestmark = [
    pytest.mark.kafka,
    pytest.mark.postgres,
    pytest.mark.service_settings(partitions=PARTITIONS, api_tokens="acme:token-java"),
]

AUTH = {"Authorization": "Bearer token-java"}
READ_TIMEOUT_S = 30  # a read that does not finish fails the test instead of hanging it


@dataclass(frozen=True)
class Run:
    """One run of the example: its ``--set`` settings, and whether it aborts a follow-up turn."""

    name: str
    settings: tuple[str, ...]
    abort_last: bool = False

    @property
    def transactional(self) -> bool:
        return any(s.startswith("transactional.id=") for s in self.settings)


TX = uuid.uuid4().hex[:8]  # transactional ids of this test run only: parallel runs never fence each other
RUNS = [
    Run("transaction committed", (f"transactional.id=convlog-java-{TX}-1",)),
    Run("transaction aborted", (f"transactional.id=convlog-java-{TX}-2",), abort_last=True),
    *(Run(codec, (f"compression.type={codec}",)) for codec in VERIFIED_CODECS),
]
KEYS = keys_on_distinct_partitions(len(RUNS), PARTITIONS, prefix="java-settings")
CASES = list(zip(RUNS, KEYS, strict=True))  # each run writes a conversation on a partition of its own


def produce(classpath: str, settings: Settings, run: Run, key: ConversationKey) -> list[dict[str, Any]]:
    assert settings.kafka_bootstrap is not None
    args = [
        "--bootstrap",
        settings.kafka_bootstrap,
        "--topic",
        settings.topic,
        "--tenant",
        key.tenant_id,
        "--user",
        key.user_id,
        "--conversation",
        key.conversation_id,
    ]
    for setting in run.settings:
        args += ["--set", setting]
    return run_example(classpath, *args, *(["--abort-last"] if run.abort_last else []))


async def test_transactions_and_every_codec_from_java_are_served_exactly(
    java_classpath: str, kafka_service: tuple[Service, Settings], tmp_path: Path
) -> None:
    svc, settings = kafka_service
    # The apps run side by side, as they would in production; the one that aborts runs last, alone,
    # so nothing else is written while its aborted records and marker close its partition.
    together = [(r, k) for r, k in CASES if not r.abort_last]
    outputs = await asyncio.gather(*(asyncio.to_thread(produce, java_classpath, settings, r, k) for r, k in together))
    sent = {run.name: out for (run, _), out in zip(together, outputs, strict=True)}
    for run, key in CASES:
        if run.abort_last:
            sent[run.name] = await asyncio.to_thread(produce, java_classpath, settings, run, key)
    ends = await svc.event_log.end_offsets()

    transport = httpx.ASGITransport(app=create_app(svc.deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog", headers=AUTH) as client:
        for run, key in CASES:
            lines = sent[run.name]
            committed = [e for e in lines if e["transaction"] != "aborted"]
            aborted = [e for e in lines if e["transaction"] == "aborted"]
            assert {e["transaction"] for e in committed} == {"committed" if run.transactional else "none"}, run
            assert len(committed) == 5, run
            assert len(aborted) == (2 if run.abort_last else 0), run
            partition = partition_for_key(key.encode(), PARTITIONS)
            assert {e["partition"] for e in lines} == {partition}, run
            last = lines[-1]["offset"]  # the abort run: an aborted record's offset, as the app was told
            if run.transactional:  # the partition ends with the transaction's marker, which takes an offset
                assert ends[partition] == last + 2, run
            path = f"/v1/users/{quote(key.user_id, safe='')}/conversations/{quote(key.conversation_id, safe='')}"

            # Read-your-writes at the offset the app was acknowledged, aborted or not: it finishes.
            context = await get(client, f"{path}/context", model="gpt-4o", budget_tokens=4000, min_offset=last)
            assert context["messages"] == TURN_CONTEXT, run
            assert context["degraded"] is False, run
            assert context["position"]["offset"] == committed[-1]["offset"], run

            events = (await get(client, f"{path}/events"))["events"]
            assert [(e["event_id"], e["offset"]) for e in events] == [(e["event_id"], e["offset"]) for e in committed]

            as_of = await get(client, f"{path}/context", model="gpt-4o", budget_tokens=4000, as_of=last)
            assert as_of["messages"] == TURN_CONTEXT, run

            transcript = (await get(client, f"{path}/messages"))["messages"]
            assert [m["message_id"] for m in transcript] == [e["event_id"] for e in committed[1:]], run

        listed = (await get(client, f"/v1/users/{KEYS[0].user_id}/conversations"))["conversations"]
        assert sorted((c["conversation_id"], c["title"]) for c in listed) == sorted(
            (k.conversation_id, TURN_TITLE) for k in KEYS
        )

    async with svc.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM convlog_read_models_v1.dead_letters")
        assert await cur.fetchone() == (0,)

    # `convlog positions`, as an operator runs it beside the service: every partition, markers
    # at their ends included, is projected to its end.
    assert settings.database_url is not None
    env = {
        **ops_env(settings.kafka_bootstrap or "", settings.database_url, settings.topic, tmp_path),
        "CONVLOG_PARTITIONS": str(PARTITIONS),
    }
    for _ in range(30):
        positions = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "convlog.cli.main", "positions"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert positions.returncode == 0, positions.stderr
        if "read_models v1 (live)  total lag 0" in positions.stdout:
            break
        await asyncio.sleep(0.5)
    else:
        raise AssertionError(positions.stdout)


async def get(client: httpx.AsyncClient, path: str, **params: Any) -> Any:
    response = await asyncio.wait_for(client.get(path, params=params), READ_TIMEOUT_S)
    assert response.status_code == 200, response.text
    return response.json()
