"""What convlog's processes and operator jobs open, resolved in one place.

The database URL (``CONVLOG_DATABASE_URL``, else the embedded Postgres of ``make demo``), the
pool on it, the event log, and the names of the consumer groups convlog's Kafka readers join.
:mod:`convlog.runtime` (the long-running processes) and :mod:`convlog.ops` (the operator
commands) both open them through here, so neither imports the other. Driver errors are
converted here or below (``StoreUnavailableError`` is retriable: exit 75), so callers only see
:class:`~events.errors.ConvlogError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from convlog.embedded.postgres import ensure_embedded_postgres
from convlog.settings import Settings
from convlog.wiring import open_event_log, open_key_store
from events.codec import EventCodec, default_codec
from events.errors import ConfigurationError
from events.log import EventLog
from events.sealing.ports import KeyRing, KeyStore
from pgstore import registry
from pgstore.migrate import migrate
from pgstore.pool import PgPool, SessionLimits, open_pool, pg_errors, retrying
from pgstore.versions import ProjectionVersion

__all__ = [
    "ReadModelsHandle",
    "database_url",
    "live_read_models",
    "migrated_database_url",
    "opened_log",
    "opened_pool",
    "ops_resources",
    "projector_group",
    "resolved_database_url",
    "service_pool",
    "summarizer_group",
]


def database_url(settings: Settings) -> str:
    """``CONVLOG_DATABASE_URL`` when set, else the embedded Postgres (started if needed)."""
    return settings.database_url or ensure_embedded_postgres(settings.data_dir, settings)


async def resolved_database_url(settings: Settings) -> str:
    """:func:`database_url` off the event loop: it may start the embedded Postgres (seconds)."""
    return await asyncio.to_thread(database_url, settings)


async def migrated_database_url(settings: Settings) -> str:
    """The database URL once the migrations ran, waiting out a Postgres outage (a long-running
    process starts before its database may)."""
    url = await resolved_database_url(settings)
    legacy = settings.legacy_window_policy()  # what versions made before 0006 ran with
    await retrying(lambda: migrate(url, legacy_window=legacy), action="migrating")
    return url


async def service_pool(url: str, *, name: str, max_size: int = 10, limits: SessionLimits | None = None) -> PgPool:
    """A long-running process's pool, connecting until Postgres answers."""
    return await retrying(lambda: open_pool(url, name=name, max_size=max_size, limits=limits), action="connecting")


# ---------------------------------------------------------------- the operator jobs' resources


@dataclass(frozen=True, slots=True)
class ReadModelsHandle:
    pool: PgPool
    live: ProjectionVersion

    @property
    def schema(self) -> str:
        return self.live.schema


@asynccontextmanager
async def opened_pool(settings: Settings, *, name: str = "convlog-ops", migrated: bool = True) -> AsyncIterator[PgPool]:
    url = await resolved_database_url(settings)  # may start the embedded Postgres
    if not migrated:  # the version registry as this build reads it (its window policies: 0006)
        await migrate(url, legacy_window=settings.legacy_window_policy())
    pool = await open_pool(url, max_size=4, name=name)
    try:
        yield pool
    finally:
        await pool.close()


@asynccontextmanager
async def live_read_models(settings: Settings) -> AsyncIterator[ReadModelsHandle]:
    """A pool and the live read-models version; a clear error if there is none yet."""
    async with opened_pool(settings, migrated=False) as pool:
        with pg_errors("look up the live read-models version"):
            live = await registry.live(pool)
        if live is None:
            raise ConfigurationError("no live read-models version yet: run `convlog migrate` and `convlog project`")
        yield ReadModelsHandle(pool, live)


@asynccontextmanager
async def opened_log(settings: Settings, *, read_only: bool = False) -> AsyncIterator[EventLog]:
    event_log = await open_event_log(settings, read_only=read_only)
    try:
        yield event_log
    finally:
        await event_log.close()


@asynccontextmanager
async def opened_keys(settings: Settings, *, read_only: bool = False) -> AsyncIterator[KeyStore]:
    """The key store content is sealed and opened with (docs/erasure.md). Opened with
    ``CONVLOG_SEALING`` off too: what was sealed before stays readable, and erasable."""
    keys = await open_key_store(settings, read_only=read_only)
    try:
        yield keys
    finally:
        await keys.close()


def keyed_codec(keys: KeyRing | None) -> EventCodec:
    """The codec that opens sealed records with ``keys`` (the plain codec without)."""
    return default_codec() if keys is None else default_codec().with_keys(keys)


@asynccontextmanager
async def ops_resources(
    settings: Settings, *, name: str, migrated: bool = False, read_only: bool = False
) -> AsyncIterator[tuple[PgPool, EventLog]]:
    """What a long operator job (rebuild, verify) opens: a pool on the migrated database and the event log.

    With Kafka the log's reader is a group-less consumer with plain assignment that never
    commits: it cannot take partitions from, or move offsets of, the live projector's group.
    The embedded log has one writer: ``read_only`` opens it beside ``convlog serve``.
    """
    async with (
        opened_pool(settings, name=name, migrated=migrated) as pool,
        opened_log(settings, read_only=read_only) as event_log,
    ):
        yield pool, event_log


# ---------------------------------------------------------------- consumer groups


def projector_group(topic: str, database: str, schema: str) -> str:
    """The projector's consumer group: ``convlog.projector.<topic>.<database>.<schema>``.

    One group per read-models version of one database projecting one topic. The topic too, as
    the summarizer's: deployments sharing a cluster (each its own topic, all with the default
    schema name and often the same instance ids) must not share a group, or each start
    rebalances the others and static members fence them. And the database
    (:func:`~pgstore.pool.database_identity`): two databases projecting one topic (a staging
    copy of the read models, a second region) each need every partition; in one group they
    would split them, each projecting half the log."""
    return f"convlog.projector.{topic}.{database}.{schema}"


def summarizer_group(topic: str, database: str) -> str:
    """The summarizer's consumer group: ``convlog.summarizer.<topic>.<database>``. The database
    (:func:`~pgstore.pool.database_identity`) as in the projector's group: two deployments
    summarizing one topic into two databases each need every partition; in one group they split
    them, and each database's summaries then covered only the conversations of its half. The
    group only assigns partitions (positions live in Postgres), so renaming it loses nothing."""
    return f"convlog.summarizer.{topic}.{database}"
