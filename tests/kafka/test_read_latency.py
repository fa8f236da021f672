"""API reads that go to the log answer at once on Kafka, read after read.

The shared API reader used to stay assigned between reads, its background fetch waiting at the
broker (``fetch_max_wait_ms``, 500 ms); Kafka answers one connection's requests in order, so
every read of a conversation whose fetch drained its batch (offsets with markers between them:
a transactional producer, a turn per transaction) waited half a second for the previous one.
bench/kafka_reads.py measures it: ~500 ms per read before, ~2 ms now, and no fetch while idle."""

from __future__ import annotations

import statistics
import time
from typing import Any

import httpx
import pytest

from convlog.runtime.serve import Service
from convlog.settings import Settings
from events.keys import ConversationKey
from query_api.http import create_app
from tests.kafka.transactional import transactional_app

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

KEY = ConversationKey("acme", "u1", "short")
AUTH = {"Authorization": "Bearer token-a"}
READS = 7
# The old reader took ~500 ms per read; the new one a few ms. Generous for a loaded 2-core box.
BOUND_S = 0.25


async def test_reads_of_a_short_conversation_from_the_log_answer_well_under_the_fetch_wait(
    kafka_service: tuple[Service, Settings], kafka_bootstrap: str
) -> None:
    svc, settings = kafka_service
    async with transactional_app(kafka_bootstrap, settings.topic, settings.partitions) as (app, kafka):
        for turn in range(2):  # a commit marker after each turn
            async with kafka.transaction():
                await app.append_user(KEY, f"question {turn}", message_id=f"u{turn}")
                last = await app.append_assistant(KEY, f"answer {turn}", message_id=f"a{turn}")
    path = f"/v1/users/{KEY.user_id}/conversations/{KEY.conversation_id}"
    transport = httpx.ASGITransport(app=create_app(svc.deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog", headers=AUTH) as client:
        context = await client.get(
            f"{path}/context", params={"model": "gpt-4o", "budget_tokens": 4000, "min_offset": last.offset}
        )
        assert context.status_code == 200, context.text
        reads: dict[str, tuple[str, dict[str, Any]]] = {
            "events": (f"{path}/events", {}),
            "as_of": (f"{path}/context", {"model": "gpt-4o", "budget_tokens": 4000, "as_of": last.offset}),
        }
        for name, (endpoint, params) in reads.items():
            took = []
            for _ in range(READS):
                started = time.monotonic()
                response = await client.get(endpoint, params=params)
                took.append(time.monotonic() - started)
                assert response.status_code == 200, response.text
            assert statistics.median(took) < BOUND_S, (name, took)
            body = response.json()
            if name == "events":
                assert [e["body"]["message_id"] for e in body["events"]] == ["u0", "a0", "u1", "a1"]
            else:
                assert [m["content"] for m in body["messages"]] == ["question 0", "answer 0", "question 1", "answer 1"]
