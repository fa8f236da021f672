"""What the operator commands open: the live read-models version in Postgres and the event log.

Driver errors are converted here (``StoreUnavailableError`` is retriable: exit 75), so the
command modules only ever see :class:`~events.errors.ConvlogError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from convlog.local.embedded_pg import database_url
from convlog.settings import Settings
from convlog.wiring import open_event_log
from events.errors import ConfigurationError
from events.log import EventLog
from pgstore import registry
from projectors.migrate import migrate
from projectors.pg import PgPool, open_pool, pg_errors
from projectors.versions import ProjectionVersion


@dataclass(frozen=True, slots=True)
class ReadModelsHandle:
    pool: PgPool
    live: ProjectionVersion

    @property
    def schema(self) -> str:
        return self.live.schema


@asynccontextmanager
async def opened_pool(settings: Settings, *, name: str = "convlog-ops", migrated: bool = True) -> AsyncIterator[PgPool]:
    url = await asyncio.to_thread(database_url, settings)  # may start the embedded Postgres
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
