"""The end-to-end check of a foreign producer example (Go, TypeScript): convlog's service on a
topic of its own, the example run against it with the golden vectors' turn, and every record
held to the vectors — its partition, its bytes, its event — then projected and served."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from convlog.runtime.serve import Service, running_service
from convlog.settings import Settings
from events.codec import default_codec
from events.formats.chat_completions.rules import violations
from events.keys import ConversationKey, partition_for_key
from events.log import LogRecord
from query_api.http import create_app
from tests.example_producers import events_vectors, keys_vectors, vector_turn_args
from tests.java_example import TURN_CONTEXT as JAVA_TURN_CONTEXT
from tests.projection_support import temporary_database
from tests.support import unique_topic

PARTITIONS = 12
TOKEN = "token-foreign"  # noqa: S105 -- the test service's token

# The vectors' turn as a context serves it (Chat Completions format): the Java example's turn,
# then a second question and the native answer, whose reasoning blocks are not in the view.
TURN_CONTEXT: list[dict[str, Any]] = [
    *JAVA_TURN_CONTEXT,
    {"role": "user", "content": "And on a public holiday?"},
    {"role": "assistant", "content": "Use Attendance > Holiday overtime instead: it is paid double."},
]


@asynccontextmanager
async def service_on_own_topic(
    kafka_bootstrap: str, pg_admin_url: str, data_dir: Path, prefix: str
) -> AsyncIterator[tuple[Service, Settings]]:
    """convlog's service on a topic of its own, which it creates (before any producer runs)."""
    async with temporary_database(pg_admin_url) as url:
        settings = Settings(
            kafka_bootstrap=kafka_bootstrap,
            topic=unique_topic(prefix),
            partitions=PARTITIONS,
            database_url=url,
            data_dir=data_dir,
            api_tokens=f"acme:{TOKEN}",
            summarizer="off",
        )
        async with running_service(settings) as svc:
            yield svc, settings


async def check_the_vectors_turn_is_served(
    svc: Service, settings: Settings, run: Callable[[list[str]], list[dict[str, Any]]], producer_name: str
) -> None:
    """Runs ``run(args)`` (the example, with the broker, topic and the vectors' turn) and checks
    everything it wrote against the golden vectors and convlog's reads."""
    assert settings.kafka_bootstrap is not None
    vectors = events_vectors()
    turn = vectors["turn"]
    key = ConversationKey(turn["tenant_id"], turn["user_id"], turn["conversation_id"])
    args = ["--bootstrap", settings.kafka_bootstrap, "--topic", settings.topic, *vector_turn_args()]
    sent = await asyncio.to_thread(run, args)

    [key_vector] = [k for k in keys_vectors()["keys"] if k["key"] == str(key)]
    partition = key_vector["partitions"][str(PARTITIONS)]
    assert partition == partition_for_key(key.encode(), PARTITIONS)
    assert [e["type"] for e in sent] == [next(iter(v["record"]["body"])).rpartition(".")[2] for v in vectors["events"]]
    assert {e["key"] for e in sent} == {str(key)}
    assert {e["partition"] for e in sent} == {partition}, f"{producer_name} put the key on another partition"
    offsets = [e["offset"] for e in sent]
    assert offsets == sorted(offsets)

    # What is on the log: the vectors' bytes exactly, each decoding to the Python producer's event.
    records = await read_partition(svc, partition, len(sent))
    codec = default_codec()
    assert [r.offset for r in records] == offsets
    for record, vector in zip(records, vectors["events"], strict=True):
        assert record.key == bytes.fromhex(vector["key_hex"])
        assert record.value.hex() == vector["value_hex"], vector["name"]
        assert {k: v.decode() for k, v in record.headers} == vector["headers"]
        assert codec.decode(record.value) == codec.decode(bytes.fromhex(vector["value_hex"]))

    transport = httpx.ASGITransport(app=create_app(svc.deps))
    base = f"/v1/users/{quote(key.user_id, safe='')}/conversations"
    path = f"{base}/{quote(key.conversation_id, safe='')}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog", headers=headers) as client:
        context = await get(client, f"{path}/context", model="gpt-4o", budget_tokens=4000, min_offset=offsets[-1])
        assert context["messages"] == TURN_CONTEXT
        assert violations(context["messages"]) == []
        assert context["degraded"] is False  # nothing was dead-lettered
        assert context["position"]["offset"] == offsets[-1]

        events = (await get(client, f"{path}/events"))["events"]
        assert [(e["event_id"], e["offset"]) for e in events] == [(e["event_id"], e["offset"]) for e in sent]
        assert {e["producer"] for e in events} == {turn["producer"]}

        transcript = (await get(client, f"{path}/messages"))["messages"]
        assert [m["message_id"] for m in transcript] == [e["event_id"] for e in sent[1:]]
        native = transcript[-1]
        assert (native["api"], native["provider"], native["model"]) == ("anthropic", "anthropic", "claude-sonnet-4-5")
        [listed] = (await get(client, base))["conversations"]
        assert (listed["conversation_id"], listed["title"]) == (key.conversation_id, "Overtime request")

    async with svc.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM convlog_read_models_v1.dead_letters")
        assert await cur.fetchone() == (0,)


async def read_partition(svc: Service, partition: int, count: int) -> list[LogRecord]:
    records: list[LogRecord] = []
    position = 0
    async with asyncio.timeout(60):
        while len(records) < count:
            batch = await svc.event_log.read({partition: position}, timeout_s=1.0)
            records.extend(batch.records)
            position = batch.positions.get(partition, position)
    return records


async def get(client: httpx.AsyncClient, path: str, **params: Any) -> Any:
    response = await client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()
