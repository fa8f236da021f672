"""A foreign producer's sealed records, end to end (issue 25: "the Java example's encrypted
records project"): convlog's service runs on a Kafka topic of its own and Postgres, served over
HTTP on a real port; the Java example (and the Go and TypeScript ones) fetches the
conversation's data key from the service's key route with the app's token, seals its turn and
writes it to the service's topic. The turn projects — no dead letter — and is served through
the HTTP API; the log and the read models hold none of it in clear; after
``DELETE …/conversations/{c}`` nothing of it is served, and a rebuild from offset 0 (made live)
serves nothing of it either, only its placeholders."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import uvicorn
from psycopg import sql

from convlog.ops.rebuilding import RebuildOptions, rebuild
from convlog.runtime.serve import Service
from convlog.settings import Settings
from events.keys import ConversationKey, partition_for_key
from query_api.http import create_app
from query_api.http.routes_context import VERSION_HEADER
from tests.example_producers import GO_EXAMPLE, TS_EXAMPLE, build_go, build_ts, go_or_skip, node_or_skip, run_producer
from tests.java_example import run_example
from tests.kafka import test_go_producer_sealed, test_java_producer_sealed
from tests.support import free_port

PARTITIONS = 4
TOKEN = "token-foreign"  # noqa: S105 -- the test service's app token, of tenant acme
AUTH = {"Authorization": f"Bearer {TOKEN}"}
KEY = ConversationKey("acme", "employee:42", "oa\\foreign")  # escaped in the record key and the associated data
PATH = f"/v1/users/{quote(KEY.user_id, safe='')}/conversations/{quote(KEY.conversation_id, safe='')}"
pytestmark = [
    pytest.mark.kafka,
    pytest.mark.postgres,
    pytest.mark.service_settings(partitions=PARTITIONS, api_tokens=f"acme:{TOKEN}", version_poll_s=0.5, sealing=True),
]


@dataclass(frozen=True)
class Example:
    """A foreign producer: how it is run, and what its turn says (in clear nowhere but the API)."""

    run: Callable[[list[str]], list[dict[str, Any]]]
    texts: tuple[str, ...]
    messages: int  # its MessageAppended records


@pytest.fixture(params=["java", "go", "ts"])
def example(request: pytest.FixtureRequest) -> Example:
    if request.param == "java":
        classpath: str = request.getfixturevalue("java_classpath")
        return Example(lambda args: run_example(classpath, *args), test_java_producer_sealed.TURN_TEXTS, 4)
    if request.param == "ts":  # the same turn as the Go example's
        node, npm = node_or_skip()
        main = build_ts(node, npm)
        return Example(
            lambda args: run_producer([node, str(main), *args], cwd=TS_EXAMPLE), test_go_producer_sealed.TURN_TEXTS, 6
        )
    binary = build_go(go_or_skip())
    return Example(
        lambda args: run_producer([str(binary), *args], cwd=GO_EXAMPLE), test_go_producer_sealed.TURN_TEXTS, 6
    )


@pytest.fixture
async def api_url(kafka_service: tuple[Service, Settings]) -> AsyncIterator[str]:
    """The service's HTTP API on a port of its own (the examples call it over TCP)."""
    svc, _ = kafka_service
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(svc.deps), host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(30):
            while not server.started:
                await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


async def raw_log(svc: Service, settings: Settings) -> list[bytes]:
    """Every record value on the conversation's partition of the service's topic, from offset 0."""
    partition = partition_for_key(KEY.encode(), PARTITIONS)
    end = (await svc.event_log.end_offsets([partition]))[partition]
    values: list[bytes] = []
    position = 0
    async with asyncio.timeout(60):
        while position < end:
            batch = await svc.event_log.read({partition: position}, timeout_s=1.0)
            values += [r.value for r in batch.records]
            position = batch.positions.get(partition, position)
    return values


async def read_models_dump(svc: Service) -> str:
    """Every row of every table of the live read-models version, as Postgres prints it (bytea as hex)."""
    assert svc.projector is not None
    assert svc.projector.schema is not None
    schema = svc.projector.schema
    dumped: list[str] = []
    async with svc.pool.connection() as conn:
        cur = await conn.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", [schema])
        for (table,) in await cur.fetchall():
            rows = await conn.execute(
                sql.SQL("SELECT t::text FROM {}.{} t").format(sql.Identifier(schema), sql.Identifier(table))
            )
            dumped += [row for (row,) in await rows.fetchall()]
    return "\n".join(dumped)


async def served(client: httpx.AsyncClient, min_offset: int) -> dict[str, Any]:
    """What the API serves of the conversation once the projection has reached ``min_offset``."""
    params: dict[str, str | int] = {"model": "gpt-4o", "budget_tokens": 4000, "min_offset": min_offset}
    answers = {
        "context": await client.get(f"{PATH}/context", params=params),
        "messages": await client.get(f"{PATH}/messages"),
        "events": await client.get(f"{PATH}/events"),
        "listing": await client.get(PATH.rsplit("/", 1)[0]),
    }
    for name, answer in answers.items():
        assert answer.status_code == 200, (name, answer.text)
    return {name: answer.json() for name, answer in answers.items()} | {
        "version": int(answers["context"].headers[VERSION_HEADER])  # the read-models version that served it
    }


def shown(answers: Any) -> str:
    """Every string the answers hold (keys and values, JSON unescaped), one a line."""
    if isinstance(answers, dict):
        return "\n".join(f"{k}\n{shown(v)}" for k, v in answers.items())
    if isinstance(answers, list):
        return "\n".join(shown(v) for v in answers)
    return answers if isinstance(answers, str) else ""


def forms(text: str) -> list[bytes]:
    """A text as it could sit in a file: plain UTF-8 and lowercase hex (Postgres prints bytea so)."""
    return [text.encode(), text.encode().hex().encode()]


async def test_a_foreign_producers_sealed_turn_projects_is_served_and_then_erased(
    example: Example, kafka_service: tuple[Service, Settings], api_url: str
) -> None:
    svc, settings = kafka_service
    assert settings.kafka_bootstrap is not None
    args = ["--bootstrap", settings.kafka_bootstrap, "--topic", settings.topic, "--tenant", KEY.tenant_id]
    args += ["--user", KEY.user_id, "--conversation", KEY.conversation_id, "--key-url", api_url, "--token", TOKEN]
    sent = await asyncio.to_thread(example.run, args)
    assert [e["type"] for e in sent] == ["ConversationStarted", *["MessageAppended"] * example.messages]
    async with httpx.AsyncClient(base_url=api_url, headers=AUTH, timeout=60) as client:
        key = await client.post(f"{PATH}/key")  # the same key as the example got: the one it sealed with
        assert key.status_code == 200, key.text
        assert {e["sealed_by"] for e in sent} == {key.json()["key_id"]}

        before = await served(client, sent[-1]["offset"])
        assert before["version"] == 1
        assert before["context"]["degraded"] is False  # nothing dead-lettered: every sealed record projected
        assert len(before["messages"]["messages"]) == example.messages
        assert [t for t in example.texts if t not in shown(before)] == []  # the whole turn is served
        stored = [(await read_models_dump(svc)).encode(), *await raw_log(svc, settings)]
        assert [t for t in example.texts if any(f in s for s in stored for f in forms(t))] == []

        erase = await client.delete(PATH)
        assert erase.status_code == 202, erase.text
        assert (await assert_nothing_served(client, erase.json()["offset"], example)) == 1
        renewed = await client.post(f"{PATH}/key")  # an erased conversation's key is gone for good
        assert renewed.json()["key_id"] != key.json()["key_id"]

        # A rebuild from offset 0, made live: the erased turn is rebuilt as placeholders only.
        assert svc.projector is not None
        assert svc.projector.version is not None
        assert svc.projector.version.version == 1
        assert await rebuild(settings, RebuildOptions(switch=True), asyncio.Event()) == 0
        async with asyncio.timeout(60):
            while await assert_nothing_served(client, erase.json()["offset"], example) != 2:
                await asyncio.sleep(0.2)
    async with svc.pool.connection() as conn:
        cur = await conn.execute(
            sql.SQL("SELECT count(*) FROM {}.dead_letters").format(sql.Identifier(svc.projector.schema or ""))
        )
        assert await cur.fetchone() == (0,)


async def assert_nothing_served(client: httpx.AsyncClient, erase_offset: int, example: Example) -> int:
    """The erased conversation serves none of the turn: its messages are placeholders (still
    there, ``erased_at`` set, no content), the events withhold it, the listing has no title.
    Returns the read-models version that served it."""
    after = await served(client, erase_offset)
    assert [t for t in example.texts if t in shown(after)] == []
    placeholders = after["messages"]["messages"]
    assert len(placeholders) == example.messages
    assert all(m["erased_at"] is not None and m["content"] is None for m in placeholders)
    assert [e["event_type"] for e in after["events"]["events"]][-1] == "ConversationErased"
    version: int = after["version"]
    return version


async def test_a_turn_written_under_another_tenant_than_the_tokens_is_refused_not_served(
    java_classpath: str, kafka_service: tuple[Service, Settings], api_url: str
) -> None:
    """The key route's token names the tenant: a producer that writes under another tenant seals
    under a key of another conversation (the token's tenant's), and its first record is a dead
    letter ``seal_unauthentic`` (the rest parked behind it), never served (docs/producers.md)."""
    svc, settings = kafka_service
    assert settings.kafka_bootstrap is not None
    other = ConversationKey("globex", KEY.user_id, KEY.conversation_id)
    args = ["--bootstrap", settings.kafka_bootstrap, "--topic", settings.topic, "--tenant", other.tenant_id]
    args += ["--user", KEY.user_id, "--conversation", KEY.conversation_id, "--key-url", api_url, "--token", TOKEN]
    sent = await asyncio.to_thread(run_example, java_classpath, *args)
    assert svc.projector is not None
    schema = sql.Identifier(svc.projector.schema or "")
    query = sql.SQL('SELECT "offset", conversation_key, error_code FROM {}.dead_letters').format(schema)
    async with asyncio.timeout(60), svc.pool.connection() as conn:
        while not (dead := await (await conn.execute(query)).fetchall()):
            await asyncio.sleep(0.2)
    assert dead == [(sent[0]["offset"], str(other), "seal_unauthentic")]
    async with httpx.AsyncClient(base_url=api_url, headers=AUTH, timeout=60) as client:
        listed = await client.get(PATH.rsplit("/", 1)[0])  # acme's: the key's conversation has no record
        assert listed.json()["conversations"] == []
