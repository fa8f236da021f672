"""``convlog project``: run the read-model projector against the configured log and Postgres."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping

import structlog

from convlog.embedded_pg import database_url
from convlog.settings import Settings
from convlog.wiring import open_event_log
from events.codec import default_codec
from events.log import EventLog
from projectors.migrate import migrate
from projectors.pg import PgPool, open_pool, retrying
from projectors.runner import Projector
from projectors.sources import KafkaGroupSource, LogSource, RecordSource
from projectors.store import ProjectionStore
from projectors.tokens import TokenCounter
from projectors.versions import ensure_live_version
from projectors.window import WindowPolicy

log = structlog.get_logger(__name__)


def build_projector(
    settings: Settings, pool: PgPool, schema: str, event_log: EventLog | None, env: Mapping[str, str]
) -> Projector:
    """A projector for ``schema``: a Kafka consumer group member when Kafka is configured, else a
    reader of ``event_log`` (the embedded log, which only one process may open)."""
    source: RecordSource
    if settings.kafka_bootstrap:
        source = KafkaGroupSource(
            bootstrap=settings.kafka_bootstrap,
            topic=settings.topic,
            group_id=f"convlog.projector.{schema}",
            # How long a crashed member keeps its partitions before the group moves them.
            session_timeout_ms=int(env.get("CONVLOG_KAFKA_SESSION_TIMEOUT_MS", "10000")),
            heartbeat_interval_ms=1000,
            group_instance_id=env.get("CONVLOG_PROJECTOR_INSTANCE_ID") or None,
        )
    elif event_log is not None:
        source = LogSource(event_log)
    else:
        raise ValueError("the embedded log must be passed in: only one process may open it")
    store = ProjectionStore(
        pool,
        schema=schema,
        codec=default_codec(),
        counter=TokenCounter(),
        policy=WindowPolicy.from_env(env),
        max_event_bytes=settings.max_event_bytes,
    )
    return Projector(source, store)


async def run_projector(settings: Settings, stop: asyncio.Event) -> Projector:
    """Project into the live read-models version until ``stop`` is set."""
    url = await asyncio.to_thread(database_url, settings)  # may start the embedded Postgres
    await retrying(lambda: migrate(url), action="migrating")  # waits out a Postgres outage
    pool = await retrying(lambda: open_pool(url, name="convlog-projector"), action="connecting")
    event_log = None
    try:
        version = await ensure_live_version(pool)
        if not settings.kafka_bootstrap:
            event_log = await open_event_log(settings)
        projector = build_projector(settings, pool, version.schema, event_log, os.environ)
        log.info("projector.start", schema=version.schema, kafka=bool(settings.kafka_bootstrap))
        await projector.run(stop)
        return projector
    finally:
        if event_log is not None:
            await event_log.close()
        await pool.close()


def main(settings: Settings) -> None:
    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_projector(settings, stop)

    asyncio.run(run())
