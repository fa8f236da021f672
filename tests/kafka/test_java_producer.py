"""The Java example producer (examples/java-producer: kafka-clients + Avro, no convlog code),
built with Maven and run against the local Kafka, while ``convlog serve``'s service runs on the
same topic: its events are projected and served through the HTTP API exactly as sent."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from convlog.runtime.serve import Service
from convlog.settings import Settings
from events.formats.chat_completions.rules import violations
from events.keys import ConversationKey, partition_for_key
from query_api.http import create_app
from tests.example_producers import REPO, events_vectors
from tests.java_example import run_example, run_lines
from tests.producer_doc import SCHEMAS, fingerprint_rows

PARTITIONS = 12
pytestmark = [
    pytest.mark.kafka,
    pytest.mark.postgres,
    pytest.mark.service_settings(partitions=PARTITIONS, api_tokens="acme:token-java"),
]

AUTH = {"Authorization": "Bearer token-java"}
# A colon and a backslash in the ids: the key escapes them, the envelope carries them as they are.
KEY = ConversationKey("acme", "employee:42", "oa\\overtime")
QUESTION = "How do I file an overtime request in the OA system?"
TOOL_RESULT = '{"hits": 3, "top": "OA > Attendance > Overtime"}'
ANSWER = "Open OA, then Attendance > Overtime, and submit the form."


def test_the_java_notation_of_every_fingerprint_is_the_byte_reversed_wire_form(java_classpath: str) -> None:
    printed = run_example(java_classpath, "--print-fingerprints", *(str(p) for p in SCHEMAS.values()))
    assert [(p["wire_hex"], p["java_long_hex"]) for p in printed] == [
        (row.wire, row.java) for row in fingerprint_rows()
    ]


def test_javas_avro_reads_and_writes_the_golden_vectors_byte_for_byte(java_classpath: str) -> None:
    """Apache Avro's BinaryMessageDecoder/Encoder (what the example writes with) and convlog's
    Python producer agree on every event of schemas/vectors/events.json, schema v4."""
    vectors = events_vectors()
    values = [v["value_hex"] for v in vectors["events"] + vectors["more_events"]]
    again = run_lines(java_classpath, "--reencode", str(REPO / vectors["schema"]), *values)
    assert again == values


async def test_a_java_producer_that_follows_the_contract_is_served_exactly(
    java_classpath: str, kafka_service: tuple[Service, Settings]
) -> None:
    svc, settings = kafka_service
    assert settings.kafka_bootstrap is not None
    sent = await asyncio.to_thread(
        run_example,
        java_classpath,
        "--bootstrap",
        settings.kafka_bootstrap,
        "--topic",
        settings.topic,
        "--tenant",
        KEY.tenant_id,
        "--user",
        KEY.user_id,
        "--conversation",
        KEY.conversation_id,
    )
    assert [e["type"] for e in sent] == ["ConversationStarted", *["MessageAppended"] * 4]
    # The key escaped as convlog escapes it, and the Java client's default partitioner put every
    # event on the partition convlog computes: one conversation, one partition, in order.
    assert {e["key"] for e in sent} == {str(KEY)} == {"acme:employee\\:42:oa\\\\overtime"}
    assert {e["partition"] for e in sent} == {partition_for_key(KEY.encode(), PARTITIONS)}
    offsets = [e["offset"] for e in sent]
    assert offsets == sorted(offsets)

    transport = httpx.ASGITransport(app=create_app(svc.deps))
    base = f"/v1/users/{quote(KEY.user_id, safe='')}/conversations"
    path = f"{base}/{quote(KEY.conversation_id, safe='')}"
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog", headers=AUTH) as client:
        context = await get(client, f"{path}/context", model="gpt-4o", budget_tokens=4000, min_offset=offsets[-1])
        assert context["messages"] == [
            {"role": "user", "content": QUESTION},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "search_kb", "arguments": '{"q": "overtime request"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": TOOL_RESULT},
            {"role": "assistant", "content": ANSWER},
        ]
        assert violations(context["messages"]) == []
        assert context["degraded"] is False  # nothing was dead-lettered
        assert context["position"]["offset"] == offsets[-1]

        events = (await get(client, f"{path}/events"))["events"]
        assert [(e["event_id"], e["offset"]) for e in events] == [(e["event_id"], e["offset"]) for e in sent]
        assert {e["producer"] for e in events} == {"java-example"}

        transcript = (await get(client, f"{path}/messages"))["messages"]
        assert [m["message_id"] for m in transcript] == [e["event_id"] for e in sent[1:]]  # message id = event id
        answer = transcript[-1]
        assert (answer["model"], answer["finish_reason"]) == ("gpt-4o", "stop")
        assert answer["usage"] == {"prompt_tokens": 160, "completion_tokens": 24, "cached_tokens": 64}
        assert answer["metadata"] == {"client": "java-example"}
        assert transcript[1]["usage"] == {"prompt_tokens": 120, "completion_tokens": 18}  # a null count is left out
        assert transcript[1]["reasoning_content"] == "The knowledge base has the procedure."

        [listed] = (await get(client, base))["conversations"]
        assert (listed["conversation_id"], listed["title"]) == (KEY.conversation_id, "Overtime request")

    async with svc.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM convlog_read_models_v1.dead_letters")
        assert await cur.fetchone() == (0,)


async def get(client: httpx.AsyncClient, path: str, **params: Any) -> Any:
    response = await client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()
