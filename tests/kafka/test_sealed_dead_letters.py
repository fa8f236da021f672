"""Sealed records that cannot be opened are each their own dead letter (issue 25, Bad input), on
a service on real Kafka and Postgres: a foreign producer writes, straight to the topic, a record
whose ciphertext has one bit flipped, one whose sealed body was moved from another
conversation's record (sealed under that conversation's key), one whose sealed body was moved to
another event of its own conversation (its key right, its associated data not), one naming a key id the key store
never had, and one malformed envelope (a nonce of the wrong size). Each becomes a dead letter
of its own conversation with its code (``seal_unauthentic`` thrice, ``unknown_key``,
``malformed_seal``), the projector goes on — a good sealed record after them
projects and is served — and nothing of the sealed plaintext is served, nor readable in the
dead letters. (tests/kafka/test_foreign_sealed_projection.py covers a turn sealed under
another tenant's key.)"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from psycopg import sql

from convlog.runtime.serve import Service
from convlog.settings import Settings
from events.codec import default_codec
from events.event_types import Event, MessageAppended
from events.keys import ConversationKey
from events.producer import EVENT_TYPE_HEADER
from events.sealing.bodies import seal_event
from events.sealing.keys import new_key_id
from query_api.http import create_app
from tests.sealing import marked_turns as turns

TOKEN = "token-a"  # noqa: S105 -- the kafka_service fixture's token of tenant acme
pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.service_settings(partitions=1)]

SOURCE = ConversationKey("acme", "u1", "source")  # whose sealed body is moved
BAD = {
    "flipped": ConversationKey("acme", "u1", "flipped"),
    "moved": ConversationKey("acme", "u1", "moved"),
    "rebound": ConversationKey("acme", "u1", "rebound"),
    "unknown": ConversationKey("acme", "u1", "unknown"),
    "malformed": ConversationKey("acme", "u1", "malformed"),
}
GOOD = ConversationKey("acme", "u1", "good")
EXPECTED = {"flipped": "seal_unauthentic", "moved": "seal_unauthentic", "rebound": "seal_unauthentic"}
EXPECTED["unknown"] = "unknown_key"
EXPECTED["malformed"] = "malformed_seal"


@pytest.fixture
async def foreign(kafka_service: tuple[Service, Settings]) -> AsyncIterator[AIOKafkaProducer]:
    _, settings = kafka_service
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    yield producer
    await producer.stop()


async def sealed(svc: Service, key: ConversationKey, text: str) -> Event:
    """A user message of ``key`` sealed under the conversation's key, as a sealing producer writes it."""
    assert svc.deps.producer.keys is not None
    data_key = await svc.deps.producer.keys.ensure(key)
    body = MessageAppended(message_id=uuid.uuid4().hex, role="user", content=text)
    event = Event(uuid.uuid4().hex, key, datetime.now(UTC), "foreign-app", body)
    return seal_event(event, data_key, default_codec())


def with_seal(event: Event, **changes: Any) -> Event:
    body = event.body
    assert isinstance(body, MessageAppended)
    assert body.sealed is not None
    return dataclasses.replace(
        event, body=dataclasses.replace(body, sealed=dataclasses.replace(body.sealed, **changes))
    )


async def send(producer: AIOKafkaProducer, topic: str, event: Event) -> int:
    """The record as a foreign producer writes it (no validation, no key store); its offset."""
    value = default_codec().encode(event)
    sent = await producer.send_and_wait(
        topic, value, key=event.key.encode(), headers=[(EVENT_TYPE_HEADER, type(event.body).__name__.encode())]
    )
    return int(sent.offset)


async def test_sealed_dead_letters(kafka_service: tuple[Service, Settings], foreign: AIOKafkaProducer) -> None:
    svc, settings = kafka_service
    secret = {name: f"zq{uuid.uuid4().hex[:14]}{name}" for name in (*BAD, "source", "good")}
    source = await sealed(svc, SOURCE, secret["source"])
    flipped = await sealed(svc, BAD["flipped"], secret["flipped"])
    seal = flipped.body.sealed  # type: ignore[union-attr]
    assert seal is not None
    ciphertext = bytearray(seal.ciphertext)
    ciphertext[len(ciphertext) // 2] ^= 0x01
    moved_body = dataclasses.replace(source.body)  # the source's sealed body, its key the source's
    rebound = await sealed(svc, BAD["rebound"], secret["rebound"])
    unknown = await sealed(svc, BAD["unknown"], secret["unknown"])
    malformed = await sealed(svc, BAD["malformed"], secret["malformed"])
    records = {
        "flipped": with_seal(flipped, ciphertext=bytes(ciphertext)),
        "moved": Event(uuid.uuid4().hex, BAD["moved"], datetime.now(UTC), "foreign-app", moved_body),
        # its own conversation's key and ciphertext, under another event id: only the associated data differs
        "rebound": dataclasses.replace(rebound, event_id=uuid.uuid4().hex),
        "unknown": with_seal(unknown, key_id=new_key_id("conversation")),
        "malformed": with_seal(malformed, nonce=b"\x00" * 5),
    }
    await send(foreign, settings.topic, source)
    offsets = {name: await send(foreign, settings.topic, event) for name, event in records.items()}
    good_offset = await send(foreign, settings.topic, await sealed(svc, GOOD, secret["good"]))

    transport = httpx.ASGITransport(app=create_app(svc.deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog", timeout=60) as client:
        await turns.caught_up(client, TOKEN, GOOD, good_offset)  # the projector went on past them
        good = await client.get("/v1/users/u1/conversations/good/messages", headers=turns.headers(TOKEN))
        assert secret["good"] in good.text
        source_read = await client.get("/v1/users/u1/conversations/source/messages", headers=turns.headers(TOKEN))
        assert secret["source"] in source_read.text  # its own record opens where it belongs

        assert await dead_letters(svc) == sorted((offsets[name], str(BAD[name]), EXPECTED[name]) for name in BAD)
        for name, key in BAD.items():
            path = f"/v1/users/u1/conversations/{key.conversation_id}"
            served = [
                await client.get(f"{path}/{what}", headers=turns.headers(TOKEN)) for what in ("messages", "events")
            ]
            text = "\n".join(r.text for r in served)
            assert [s for s in secret.values() if s in text] == [], name
        listed = await client.get("/v1/users/u1/conversations", headers=turns.headers(TOKEN))
        assert [s for s in secret.values() if s in listed.text] == []
    dumped = await dead_letter_rows(svc)
    assert [s for s in secret.values() if s.encode() in dumped or s.encode().hex().encode() in dumped] == []


async def dead_letters(svc: Service) -> list[tuple[int, str, str]]:
    assert svc.projector is not None
    query = sql.SQL('SELECT "offset", conversation_key, error_code FROM {}.dead_letters ORDER BY "offset"').format(
        sql.Identifier(svc.projector.schema or "")
    )
    async with asyncio.timeout(30):
        while True:
            async with svc.pool.connection() as conn:
                rows = [tuple(r) for r in await (await conn.execute(query)).fetchall()]
            if len(rows) >= len(BAD):
                return sorted(rows)
            await asyncio.sleep(0.2)


async def dead_letter_rows(svc: Service) -> bytes:
    """Every dead letter as Postgres prints it (bytea as hex): the record, its error."""
    assert svc.projector is not None
    query = sql.SQL("SELECT t::text FROM {}.dead_letters t").format(sql.Identifier(svc.projector.schema or ""))
    async with svc.pool.connection() as conn:
        return "\n".join(r for (r,) in await (await conn.execute(query)).fetchall()).encode()
