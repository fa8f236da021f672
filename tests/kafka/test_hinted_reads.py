"""Read-your-writes takes the projector's commit as a hint and confirms it from the context it
reads (one round trip fewer): a hint the read models do not hold — another version's commit,
say — never serves a context without the write (real Kafka and Postgres)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from convlog.runtime.projecting import run_projector
from convlog.runtime.serve import running_service
from convlog.settings import Settings
from events.keys import ConversationKey, partition_for_key
from query_api.http import create_app
from tests.projection_support import temporary_database
from tests.support import unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

BASE = "/v1/users/u/conversations/c"


async def test_a_hint_the_read_models_do_not_hold_waits_for_the_projection(
    kafka_bootstrap: str, pg_admin_url: str, tmp_path: Path
) -> None:
    async with temporary_database(pg_admin_url) as url:
        settings = Settings(
            database_url=url,
            kafka_bootstrap=kafka_bootstrap,
            topic=unique_topic("hint"),
            partitions=2,
            api_tokens="acme:t",
            summarizer="off",
            projector="off",
            data_dir=tmp_path,
        )
        stop = asyncio.Event()
        async with running_service(settings) as service:
            watch = service.deps.queries.positions
            assert watch is not None
            transport = httpx.ASGITransport(app=create_app(service.deps))
            headers = {"Authorization": "Bearer t"}
            async with httpx.AsyncClient(transport=transport, base_url="http://convlog", headers=headers) as client:
                posted = await client.post(f"{BASE}/messages", json={"role": "user", "content": "hello"})
                assert posted.status_code == 202, posted.text
                offset = posted.json()["offset"]
                partition = partition_for_key(ConversationKey("acme", "u", "c").encode(), 2)
                watch.committed({partition: offset + 1_000})  # a commit no projection of these read models made
                reading = asyncio.create_task(
                    client.get(
                        f"{BASE}/context", params={"model": "gpt-4o", "budget_tokens": 1000, "min_offset": offset}
                    )
                )
                await asyncio.sleep(0.5)
                # Nothing projected yet: not answered (the conversation is not even known to the read models).
                assert not reading.done()
                projecting = asyncio.create_task(run_projector(settings, stop))
                try:
                    context = await asyncio.wait_for(reading, 30)
                finally:
                    stop.set()
                    await projecting
    assert context.status_code == 200, context.text
    assert context.json()["messages"][-1]["content"] == "hello"
