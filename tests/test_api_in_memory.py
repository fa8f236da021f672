"""The HTTP API over the in-memory read models: no Postgres anywhere. The embedded log, the
projector running in-process into InMemoryProjectionStore (the same fold as in Postgres), and
create_app reading InMemoryReadModels through the ReadModels port — what the port is for."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from convlog.demo.data import OA_SYSTEM_PROMPT, OA_TURNS
from events.blocks import blocks_to_json
from events.codec import default_codec
from events.embedded_log import EmbeddedEventLog
from events.event_types import SummaryRecorded
from events.formats.chat_completions.rules import violations
from events.keys import ConversationKey
from events.producer import ConversationProducer
from projectors.log_source import LogSource
from projectors.memory_store import InMemoryProjectionStore
from projectors.memory_tables import MemoryTables
from projectors.runner import Projector
from projectors.window import WindowPolicy
from query_api.http import ApiDeps, HttpSettings, create_app
from query_api.live import QueryService
from query_api.memory_reads import InMemoryReadModels
from query_api.metrics import Metrics
from query_api.ports import ReadModels
from tests.native_support import NATIVE_SECRETS, thinking_answer, tool_result
from tests.projection_support import COUNTER

A = {"Authorization": "Bearer token-a"}
BASE = "/v1/users/u1/conversations"


@pytest.fixture
async def deps(log: EmbeddedEventLog) -> AsyncIterator[ApiDeps]:
    """The API's dependencies with a projector running beside them, as ``convlog serve`` runs them, in memory."""
    tables = MemoryTables()
    store = InMemoryProjectionStore(
        tables, codec=default_codec(), counter=COUNTER, policy=WindowPolicy(), max_event_bytes=1 << 20
    )
    reads = InMemoryReadModels(tables)

    async def live_reads() -> ReadModels:
        return reads

    async def readiness() -> dict[str, Any]:
        return {"ready": True}

    deps = ApiDeps(
        queries=QueryService(log=log, reads=live_reads, metrics=Metrics()),
        producer=ConversationProducer(log, producer="test"),
        http=HttpSettings(tokens={"token-a": "acme"}),
        readiness=readiness,
    )
    stop = asyncio.Event()
    projecting = asyncio.create_task(Projector(LogSource(log), store, fetch_timeout_s=0.05).run(stop))
    try:
        yield deps
    finally:
        stop.set()
        await projecting


@pytest.fixture
async def in_memory_client(deps: ApiDeps) -> AsyncIterator[httpx.AsyncClient]:
    """The API over ``deps``; another ``create_app(deps)`` is the same API after a restart."""
    transport = httpx.ASGITransport(app=create_app(deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as c:
        yield c


async def post(client: httpx.AsyncClient, message: dict[str, Any], *, key: str | None = None) -> Any:
    headers = A if key is None else {**A, "Idempotency-Key": key}
    response = await client.post(f"{BASE}/oa/messages", json=message, headers=headers)
    assert response.status_code == 202, response.text
    return response.json()


async def test_read_your_writes_and_a_valid_context_without_postgres(in_memory_client: httpx.AsyncClient) -> None:
    last = await post(in_memory_client, {"role": "system", "content": OA_SYSTEM_PROMPT})
    for question, answer in OA_TURNS:
        await post(in_memory_client, {"role": "user", "content": question})
        last = await post(in_memory_client, {"role": "assistant", "content": answer, "finish_reason": "stop"})
    response = await in_memory_client.get(
        f"{BASE}/oa/context",
        params={"model": "gpt-4o", "budget_tokens": 300, "min_offset": last["offset"]},
        headers=A,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert violations(body["messages"]) == []
    assert body["messages"][0] == {"role": "system", "content": OA_SYSTEM_PROMPT}
    assert body["messages"][-1]["content"] == OA_TURNS[-1][1]  # min_offset waited for the projector
    assert body["token_count"] <= 300
    assert body["position"]["offset"] == last["offset"]
    assert body["dropped_turns"] > 0  # the whole conversation costs about 530 tokens: the oldest turns went
    page = (await in_memory_client.get(f"{BASE}/oa/messages", params={"limit": 5}, headers=A)).json()
    assert [m["content"] for m in page["messages"]][-1] == OA_TURNS[-1][1]
    listed = (await in_memory_client.get(BASE, headers=A)).json()["conversations"]
    assert [(c["conversation_id"], c["turn_count"]) for c in listed] == [("oa", len(OA_TURNS))]


async def test_an_erased_conversation_serves_nothing_of_it_without_postgres(
    in_memory_client: httpx.AsyncClient,
) -> None:
    secret = await post(in_memory_client, {"role": "user", "content": "my card is 4111 1111 1111 1111"})
    await post(in_memory_client, {"role": "assistant", "content": "noted", "finish_reason": "stop"})
    erase = await in_memory_client.delete(f"{BASE}/oa", headers=A)
    assert erase.status_code == 202, erase.text
    response = await in_memory_client.get(
        f"{BASE}/oa/context",
        params={"model": "gpt-4o", "budget_tokens": 2000, "min_offset": erase.json()["offset"]},
        headers=A,
    )
    assert response.status_code == 200, response.text
    erased = erase.json()
    body = response.json()
    assert (body["messages"], body["position"]) == ([], {"partition": erased["partition"], "offset": erased["offset"]})
    entries = (await in_memory_client.get(f"{BASE}/oa/messages", headers=A)).json()["messages"]
    assert [(e["message_id"], e["content"], e["erased_at"] is not None) for e in entries] == [
        (secret["message_id"], None, True),
        (entries[1]["message_id"], None, True),
    ]


async def test_the_audit_shows_a_native_messages_blocks_and_origin_until_it_is_redacted(
    in_memory_client: httpx.AsyncClient, log: EmbeddedEventLog
) -> None:
    producer = ConversationProducer(log, producer="test")
    key = ConversationKey("acme", "u1", "native")
    await producer.append_user(key, "Weather in Paris and Oslo?", message_id="q1")
    await producer.append(key, thinking_answer("a1"))
    await producer.append(key, tool_result("toolu_1", "sunny", message_id="r1"))
    last = await producer.append(key, tool_result("toolu_2", "no such city", message_id="r2", is_error=True))

    async def audit() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        context = await in_memory_client.get(
            f"{BASE}/native/context",
            params={"model": "gpt-4o", "budget_tokens": 4000, "min_offset": last.offset},
            headers=A,
        )
        assert context.status_code == 200, context.text
        messages = await in_memory_client.get(f"{BASE}/native/messages", headers=A)
        events = await in_memory_client.get(f"{BASE}/native/events", headers=A)
        assert (messages.status_code, events.status_code) == (200, 200)
        return messages.json()["messages"], [e["body"] for e in events.json()["events"]]

    messages, events = await audit()
    answer = blocks_to_json(thinking_answer().blocks)
    for entries in (messages, events):
        assert not {"blocks", "provider", "api", "is_error"} & entries[0].keys()  # a Chat Completions message
        assert (entries[1]["blocks"], entries[1]["provider"], entries[1]["api"]) == (
            answer,
            "anthropic",
            "anthropic",
        )
        assert entries[1]["usage"]["cache_write_tokens"] == 150
        assert (entries[3]["is_error"], entries[3]["blocks"]) == (True, [{"type": "text", "text": "no such city"}])
    last = await producer.redact(key, "a1", reason="pii")
    messages, events = await audit()
    text = json.dumps([messages, events])
    assert [s for s in NATIVE_SECRETS if s in text] == []
    assert "blocks" not in messages[1]
    assert (events[1]["blocks"], events[1]["content"]) == (None, "[withheld]")


async def context_after(client: httpx.AsyncClient, offset: int) -> Any:
    response = await client.get(
        f"{BASE}/oa/context", params={"model": "gpt-4o", "budget_tokens": 2000, "min_offset": offset}, headers=A
    )
    assert response.status_code == 200, response.text
    return response.json()


async def test_a_redaction_of_a_message_the_conversation_never_had_is_404_and_parks_nothing(
    in_memory_client: httpx.AsyncClient, log: EmbeddedEventLog
) -> None:
    """Unknown targets are refused at the edge: nothing is appended, so nothing the projection
    could dead-letter, and the clear and the erase after it are applied."""
    secret = await post(in_memory_client, {"role": "user", "content": "my card is 4111"})
    summary = SummaryRecorded("s1", "a summary", secret["message_id"], "test-model", "v1")
    await ConversationProducer(log, producer="test").append(
        ConversationKey("acme", "u1", "oa"), summary, event_id="s1-event"
    )
    cleared = await in_memory_client.post(f"{BASE}/oa/clear", headers=A)
    assert cleared.status_code == 202, cleared.text
    for target in ("never-sent", "s1", "s1-event", cleared.json()["event_id"]):  # no message, events that are not
        response = await in_memory_client.post(f"{BASE}/oa/messages/{target}/redact", json={"reason": "pii"}, headers=A)
        assert (response.status_code, response.json()["error"]["code"]) == (404, "message_not_found"), response.text
    unknown = await in_memory_client.post(f"{BASE}/nobody/messages/{secret['message_id']}/redact", json={}, headers=A)
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "not_found")
    erased = await in_memory_client.delete(f"{BASE}/oa", headers=A)
    assert erased.status_code == 202, erased.text
    body = await context_after(in_memory_client, erased.json()["offset"])
    assert (body["messages"], body["degraded"]) == ([], False)
    events = (await in_memory_client.get(f"{BASE}/oa/events", headers=A)).json()["events"]
    assert [e["event_type"] for e in events] == [
        "MessageAppended",
        "SummaryRecorded",
        "ConversationCleared",
        "ConversationErased",
    ]


async def test_a_redaction_whose_idempotency_key_is_taken_is_409_naming_what_holds_it(
    in_memory_client: httpx.AsyncClient,
) -> None:
    first = await post(in_memory_client, {"role": "user", "content": "secret one"}, key="k1")
    second = await post(
        in_memory_client, {"role": "assistant", "content": "secret two", "finish_reason": "stop"}, key="k2"
    )

    async def redact(message: Any, key: str) -> httpx.Response:
        return await in_memory_client.post(
            f"{BASE}/oa/messages/{message['message_id']}/redact",
            json={"reason": "pii"},
            headers={**A, "Idempotency-Key": key},
        )

    for key, holder in (("k1", first), ("k2", second)):  # its own message's key, another message's
        taken = await redact(first, key)
        assert taken.status_code == 409, taken.text
        error = taken.json()["error"]
        assert (error["code"], error["event_id"], error["offset"]) == ("idempotency_key_reused", key, holder["offset"])
    redacted = await redact(first, "r1")
    assert redacted.status_code == 202, redacted.text
    assert (await redact(first, "r1")).json() == redacted.json()  # a retry: the first redaction's answer
    again = await redact(second, "r1")  # an earlier redaction's key, for another message
    assert (again.status_code, again.json()["error"]["offset"]) == (409, redacted.json()["offset"])
    last = await redact(second, "r2")
    assert last.status_code == 202, last.text
    body = await context_after(in_memory_client, last.json()["offset"])
    assert "secret" not in json.dumps(body)


@pytest.mark.parametrize("withdraw", ["erase", "redact"])
async def test_after_an_erasure_a_repeated_idempotency_key_does_not_tell_whether_the_body_matched(
    in_memory_client: httpx.AsyncClient, deps: ApiDeps, withdraw: str
) -> None:
    """No erasure oracle: once the content is gone, the answer to its key must not depend on
    the body sent with it — in this process and after a restart (a new API, no memory)."""
    secret = {"role": "user", "content": "my card is 4111"}
    first = await post(in_memory_client, secret, key="k1")
    if withdraw == "erase":
        done = await in_memory_client.delete(f"{BASE}/oa", headers=A)
    else:
        done = await in_memory_client.post(f"{BASE}/oa/messages/{first['message_id']}/redact", json={}, headers=A)
    assert done.status_code == 202, done.text
    restarted = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(deps)), base_url="http://convlog")
    async with restarted:
        for api in (in_memory_client, restarted):
            answers = [
                await api.post(f"{BASE}/oa/messages", json=body, headers={**A, "Idempotency-Key": "k1"})
                for body in (secret, {"role": "user", "content": "my card is 5500"})
            ]
            assert [a.status_code for a in answers] == [409, 409]
            assert answers[0].json() == answers[1].json()
            error = answers[0].json()["error"]
            assert (error["code"], error["event_id"], error["offset"]) == (
                "idempotency_key_erased",
                "k1",
                first["offset"],
            )


async def test_a_parked_conversation_is_never_served_past_its_dead_letter_and_an_erase_is_not_held(
    in_memory_client: httpx.AsyncClient, log: EmbeddedEventLog
) -> None:
    """A record the projection cannot apply parks its conversation: a read-your-writes context
    past it is 409 naming the dead letter, never a 200 missing acknowledged events; the erase
    sent after it is applied at once, to the held messages too."""
    first = await post(in_memory_client, {"role": "user", "content": "my card is 4111"})
    garbage = await log.append(key=ConversationKey("acme", "u1", "oa").encode(), value=b"\xc3\x01garbage")
    held = await post(in_memory_client, {"role": "user", "content": "and my pin is 1234"})
    params = {"model": "gpt-4o", "budget_tokens": 2000, "min_offset": held["offset"]}
    parked = await in_memory_client.get(f"{BASE}/oa/context", params=params, headers=A)
    assert parked.status_code == 409, parked.text
    error = parked.json()["error"]
    assert (error["code"], error["partition"], error["offset"]) == (
        "conversation_parked",
        garbage.partition,
        garbage.offset,
    )
    assert (await context_after(in_memory_client, first["offset"]))[
        "degraded"
    ] is True  # before it: served, and said so
    # A record this build cannot decode does not stop a privacy action.
    redacted = await in_memory_client.post(f"{BASE}/oa/messages/{held['message_id']}/redact", json={}, headers=A)
    assert redacted.status_code == 202, redacted.text
    erased = await in_memory_client.delete(f"{BASE}/oa", headers=A)
    assert erased.status_code == 202, erased.text
    body = await context_after(in_memory_client, erased.json()["offset"])
    assert (body["messages"], body["degraded"]) == ([], False)
    [listed] = (await in_memory_client.get(BASE, headers=A)).json()["conversations"]
    assert (listed["erased"], listed["degraded"], listed["message_count"]) == (True, False, 2)


async def test_the_audit_of_an_erased_conversation_withholds_what_was_held_behind_a_dead_letter(
    in_memory_client: httpx.AsyncClient, log: EmbeddedEventLog
) -> None:
    """A record that breaks the event rules (a summary of a message the conversation never had)
    parks the conversation; the erase after it still applies to the messages held behind it, in
    the read models and in the audit's fold of the log alike."""
    producer = ConversationProducer(log, producer="test")
    key = ConversationKey("acme", "u1", "oa")
    await post(in_memory_client, {"role": "user", "content": "hello"})
    await producer.append(key, SummaryRecorded("s1", "a summary", "never-sent", "test-model", "v1"), event_id="s1")
    await post(in_memory_client, {"role": "user", "content": "my card is 4111"})
    erased = await in_memory_client.delete(f"{BASE}/oa", headers=A)
    assert erased.status_code == 202, erased.text
    assert (await context_after(in_memory_client, erased.json()["offset"]))["messages"] == []
    for path in ("events", "messages"):
        audit = await in_memory_client.get(f"{BASE}/oa/{path}", headers=A)
        assert audit.status_code == 200, audit.text
        assert "4111" not in audit.text, path
