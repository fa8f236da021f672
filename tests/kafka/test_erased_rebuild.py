"""A rebuild from offset 0 after a user's erasure (issue 25, Done means): on a service on Kafka
and Postgres, alice (two conversations) and bob (two) write marked turns in every format
(tests/sealing/marked_turns.py); bob's contexts as they were served — ``as_of`` every one of
his records, in every format, and ``before_message`` every message — are recorded; alice is
erased (``DELETE /v1/users/alice``) and the read models rebuilt from offset 0 and made live.
Then alice's conversations are erased placeholders wherever they can be read (``/events``,
``as_of``, ``before_message``, the transcript, the listing, the export), and bob's contexts
are byte for byte what they were."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import httpx
import pytest

from convlog.jobs.export import ExportFilter, export_transcripts
from convlog.ops.rebuilding import RebuildOptions, rebuild
from convlog.runtime.serve import Service
from convlog.settings import Settings
from events.keys import ConversationKey
from query_api.http import create_app
from query_api.http.routes_context import VERSION_HEADER
from tests.sealing import marked_turns as turns
from tests.sealing.disk_scan import Markers

TOKEN = "token-a"  # noqa: S105 -- the kafka_service fixture's token of tenant acme
A = turns.headers(TOKEN)
ALICE = [ConversationKey("acme", "alice", "c1"), ConversationKey("acme", "alice", "c2")]
BOB = [ConversationKey("acme", "bob", "c1"), ConversationKey("acme", "bob", "c2")]
FORMATS = ("chat_completions", "anthropic", "responses", "gemini")
pytestmark = [
    pytest.mark.kafka,
    pytest.mark.postgres,
    pytest.mark.service_settings(partitions=2, version_poll_s=0.2),
]


def base(key: ConversationKey) -> str:
    return f"/v1/users/{key.user_id}/conversations/{key.conversation_id}"


async def events_of(client: httpx.AsyncClient, key: ConversationKey) -> list[dict[str, Any]]:
    answer = await client.get(f"{base(key)}/events", headers=A)
    assert answer.status_code == 200, answer.text
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


async def contexts_served(client: httpx.AsyncClient, key: ConversationKey) -> dict[str, bytes]:
    """The conversation's contexts as served: after each of its records (``as_of``) in every
    format, and before each of its messages (``before_message``); the bodies' bytes."""
    served: dict[str, bytes] = {}
    params: dict[str, Any] = {"model": "gpt-4o", "budget_tokens": 100_000}
    for event in await events_of(client, key):
        for fmt in FORMATS:
            answer = await client.get(f"{base(key)}/context", params=params | {"as_of": event["offset"], "format": fmt})
            assert answer.status_code == 200, answer.text
            served[f"as_of {event['offset']} {fmt}"] = answer.content
        if event["event_type"] == "MessageAppended" and event.get("message_id"):
            answer = await client.get(f"{base(key)}/context", params=params | {"before_message": event["message_id"]})
            assert answer.status_code == 200, answer.text
            served[f"before {event['message_id']}"] = answer.content
    return served


async def everything_readable(svc: Service, client: httpx.AsyncClient, key: ConversationKey) -> str:
    """All that the API and an export serve of ``key``, as one text."""
    reads = [(await client.get(f"{base(key)}/{what}", headers=A)).text for what in ("events", "messages", "summaries")]
    reads.append((await client.get(base(key).rsplit("/", 1)[0], headers=A)).text)
    reads += [body.decode() for body in (await contexts_served(client, key)).values()]
    assert svc.projector is not None
    assert svc.projector.schema is not None
    out = io.StringIO()
    where = ExportFilter(tenant=key.tenant_id, user=key.user_id)
    await export_transcripts(svc.pool, svc.projector.schema, where, out, progress=False, keys=svc.deps.producer.keys)
    return "\n".join([*reads, out.getvalue()])


async def live_version(client: httpx.AsyncClient, key: ConversationKey) -> int:
    params: dict[str, Any] = {"model": "gpt-4o", "budget_tokens": 100_000}
    answer = await client.get(f"{base(key)}/context", params=params, headers=A)
    assert answer.status_code == 200, answer.text
    return int(answer.headers[VERSION_HEADER])


async def test_erased_rebuild(kafka_service: tuple[Service, Settings]) -> None:
    svc, settings = kafka_service
    alice, bob = Markers("alice"), Markers("bob")
    transport = httpx.ASGITransport(app=create_app(svc.deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog", headers=A, timeout=60) as client:
        for keys, m in ((ALICE, alice), (BOB, bob)):
            last = await turns.write_user(svc, client, TOKEN, keys, m)
            await turns.caught_up(client, TOKEN, keys[-1], last)
        before = {str(k): await contexts_served(client, k) for k in BOB}
        assert all(bob.prefix.encode() in b"".join(c.values()) for c in before.values())
        seen = await everything_readable(svc, client, ALICE[0])
        assert alice("ct") in seen  # the reads below can tell content from placeholders

        erase = await client.delete("/v1/users/alice")
        assert erase.status_code == 202, erase.text
        for done, key in zip(erase.json()["erased_conversations"], ALICE, strict=True):
            await turns.caught_up(client, TOKEN, key, done["offset"])
        assert await live_version(client, BOB[0]) == 1
        assert await rebuild(settings, RebuildOptions(switch=True), asyncio.Event()) == 0
        async with asyncio.timeout(30):
            while await live_version(client, BOB[0]) != 2:  # serve follows the switch
                await asyncio.sleep(0.2)

        for key in ALICE:
            events = await events_of(client, key)
            assert events[-1]["event_type"] == "ConversationErased"
            messages = (await client.get(f"{base(key)}/messages")).json()["messages"]
            assert messages
            assert all(m["erased_at"] is not None and m["content"] is None for m in messages)
            assert alice.prefix not in await everything_readable(svc, client, key)
        assert {str(k): await contexts_served(client, k) for k in BOB} == before
