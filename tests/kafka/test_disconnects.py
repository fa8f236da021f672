"""Reads of the log end with their client: a client that disconnects cancels its server-side
read (events endpoint, ``as_of``), and a read under way does not keep the server from stopping.

The log is real Kafka; a gate in front of its ``read`` holds a read open for as long as the test
needs (a long partition would do the same, only slowly) and records whether it was cancelled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest
import uvicorn

from convlog.runtime.serve import http_server
from convlog.settings import Settings
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from pgstore.reads import PostgresReadModels
from query_api.http import ApiDeps, HttpSettings, create_app
from query_api.live import QueryService
from query_api.metrics import Metrics
from tests.kafka.ops_support import Ops
from tests.projection_support import project_all
from tests.support import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

KEY = ConversationKey("acme", "u1", "long-read")
EVENTS = f"/v1/users/{KEY.user_id}/conversations/{KEY.conversation_id}/events"
AS_OF = f"/v1/users/{KEY.user_id}/conversations/{KEY.conversation_id}/context?model=gpt-4o&budget_tokens=4000&as_of=0"


class GatedLog:
    """The real log, whose reads wait at a gate first (and note whether they were cancelled there)."""

    def __init__(self, log: KafkaEventLog) -> None:
        self._log = log
        self.reading = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.gate = asyncio.Event()

    @property
    def partition_count(self) -> int:
        return self._log.partition_count

    async def append(self, **kwargs: Any) -> Any:
        return await self._log.append(**kwargs)

    async def read(self, positions: Mapping[int, int], **kwargs: Any) -> Any:
        self.reading.set()
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return await self._log.read(positions, **kwargs)

    async def end_offsets(self, partitions: Collection[int] | None = None) -> dict[int, int]:
        return await self._log.end_offsets(partitions)

    async def close(self) -> None:
        pass


@asynccontextmanager
async def serving(ops: Ops, server_of: Any) -> AsyncIterator[tuple[GatedLog, int, asyncio.Task[None], uvicorn.Server]]:
    await ops.producer.append_user(KEY, "a question")
    await project_all(ops.log, ops.projection.store())
    gated = GatedLog(ops.log)

    async def reads() -> PostgresReadModels:
        return PostgresReadModels(ops.projection.pool, schema=ops.projection.version.schema)

    async def ready() -> dict[str, object]:
        return {"ready": True}

    queries = QueryService(log=gated, reads=reads, metrics=Metrics())  # type: ignore[arg-type]
    deps = ApiDeps(
        queries=queries, producer=ops.producer, http=HttpSettings(tokens={"token-a": "acme"}), readiness=ready
    )
    port = free_port()
    server = server_of(create_app(deps), port)
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(200):
            if server.started:
                break
            await asyncio.sleep(0.05)
        yield gated, port, task, server
    finally:
        gated.gate.set()
        server.should_exit = True
        await asyncio.wait_for(task, 30)


def plain_server(app: Any, port: int) -> uvicorn.Server:
    return uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))


async def send_get(port: int, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer token-a\r\n\r\n".encode())
    await writer.drain()
    return reader, writer


@pytest.mark.parametrize("path", [EVENTS, AS_OF], ids=["events", "as_of"])
async def test_a_client_that_disconnects_cancels_its_read_of_the_log(ops: Ops, path: str) -> None:
    async with serving(ops, plain_server) as (gated, port, _, _):
        _, writer = await send_get(port, path)
        await asyncio.wait_for(gated.reading.wait(), 10)
        writer.close()  # the client gives up
        await writer.wait_closed()
        await asyncio.wait_for(gated.cancelled.wait(), 5)


async def test_a_read_under_way_does_not_keep_the_server_from_stopping(ops: Ops) -> None:
    def configured(app: Any, port: int) -> uvicorn.Server:
        return http_server(app, Settings(http_port=port, shutdown_grace_s=1))

    async with serving(ops, configured) as (gated, port, task, server):
        _, writer = await send_get(port, EVENTS)  # the client stays connected
        await asyncio.wait_for(gated.reading.wait(), 10)
        started = time.monotonic()
        server.should_exit = True  # what SIGTERM does
        await asyncio.wait_for(asyncio.shield(task), 10)
        assert time.monotonic() - started < 5
        assert gated.cancelled.is_set()
        writer.close()
