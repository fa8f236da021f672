"""``convlog serve``: the HTTP API, the projector and the summarizer in one process.

Against Kafka and Postgres when configured, else the embedded log and an embedded Postgres.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import structlog
import uvicorn
import uvloop

from convlog.local.embedded_pg import database_url
from convlog.runtime.http_server import server_config
from convlog.runtime.log_guard import LogGuard
from convlog.runtime.metrics_server import ProjectorCollector
from convlog.runtime.projecting import LiveProjector
from convlog.runtime.summarizing import build_summarizer
from convlog.settings import Settings
from convlog.wiring import make_producer, open_event_log
from events.errors import ConfigurationError
from events.log import EventLog
from projectors.migrate import migrate
from projectors.pg import PgPool, open_pool, retrying
from projectors.positions_watch import PositionsWatch
from projectors.tokens import model_spec
from projectors.versions import live_version
from projectors.window import WindowPolicy
from query_api.http import ApiDeps, create_app
from query_api.metrics import Metrics
from query_api.positions_listener import PositionsListener
from query_api.reads import PostgresReadModels
from summarizer.runner import Summarizer

log = structlog.get_logger(__name__)


@dataclass
class Service:
    """Everything ``serve`` runs, built by :func:`running_service`; tests use it directly."""

    deps: ApiDeps
    projector: LiveProjector
    summarizer: Summarizer | None
    pool: PgPool
    event_log: EventLog


class _LiveReads:
    """The live version's reads, looked up again every few seconds (a switch changes it)."""

    def __init__(self, pool: PgPool, ttl_s: float = 5.0) -> None:
        self._pool, self._ttl_s = pool, ttl_s
        self._reads: PostgresReadModels | None = None
        self._policy = WindowPolicy()
        self._at = 0.0

    async def __call__(self) -> PostgresReadModels:
        if self._reads is None or time.monotonic() - self._at > self._ttl_s:
            async with self._pool.connection() as conn:
                live = await live_version(conn)
            if live is None:
                raise ConfigurationError("no live read-models version (run convlog migrate / convlog project)")
            if self._reads is None or self._reads.schema != live.schema:
                self._reads = PostgresReadModels(self._pool, schema=live.schema)
            self._policy, self._at = live.policy, time.monotonic()
        return self._reads

    async def policy(self) -> WindowPolicy:
        """The live version's window policy: as-of contexts are rebuilt with it."""
        await self()
        return self._policy


async def _schema_of(reads: _LiveReads) -> str:
    return (await reads()).schema


@asynccontextmanager
async def running_service(settings: Settings) -> AsyncIterator[Service]:
    url = await asyncio.to_thread(database_url, settings)
    await retrying(lambda: migrate(url, legacy_window=settings.legacy_window_policy()), action="migrating")
    pool = await retrying(lambda: open_pool(url, name="convlog-serve"), action="connecting")
    event_log = await open_event_log(settings)
    stop = asyncio.Event()
    try:
        # Kafka: a group member of its own; embedded: the log this process already opened.
        # It follows ``convlog rebuild --switch`` to the new live version.
        # The projector's commits wake read-your-writes requests of this process (no polling).
        watch = PositionsWatch()
        projector = LiveProjector(settings, pool, event_log, on_committed=watch.committed)
        await projector.start_version()
        metrics = Metrics()
        metrics.registry.register(ProjectorCollector(projector))
        reads = _LiveReads(pool)
        # Read models ahead of the log (records lost from it): writers get a log that refuses appends.
        guard = await retrying(lambda: LogGuard.measure(event_log, reads), action="comparing the log and read models")
        appending = guard.appending(event_log)

        background: dict[str, asyncio.Task[None]] = {}
        readiness = _Readiness(projector, event_log, pool, metrics, background, guard=guard)

        default_encoding = settings.default_encoding
        model_spec("unknown-model", default_encoding=default_encoding)  # refuse a bad setting at start
        deps = ApiDeps(
            tokens=settings.token_tenants(),
            producer=make_producer(appending, settings, producer="convlog-api"),
            log=event_log,
            reads=reads,
            readiness=readiness,
            metrics=metrics,
            image_turns=settings.window_image_turns,
            default_encoding=default_encoding,
            counted_encodings=settings.counted_encodings(),
            max_body_bytes=settings.max_event_bytes * 2,
            policy=projector.version.policy if projector.version is not None else settings.window_policy(),
            live_policy=reads.policy,
            max_event_bytes=settings.max_event_bytes,
            log_behind=guard.check_read,
            positions=watch,
        )
        summarizer = None
        if settings.summarizer == "on":
            summarizer = build_summarizer(settings, pool, appending, registry=metrics.registry)
        background["projector"] = asyncio.create_task(projector.run(stop), name="projector")
        if summarizer is not None:
            background["summarizer"] = asyncio.create_task(summarizer.run(stop), name="summarizer")
        for task in _retention_task(settings, pool, appending, stop):
            background["retention"] = task
        for task in background.values():
            task.add_done_callback(_report_crash)
        # Every projector's commits (other processes' too: a Kafka group shares the partitions).
        listener = PositionsListener(url, watch, lambda: _schema_of(reads))
        listening = asyncio.create_task(listener.run(stop), name="positions-listener")
        try:
            yield Service(deps, projector, summarizer, pool, event_log)
        finally:
            stop.set()
            listening.cancel()  # it may sit in a wait for notifications; nothing to finish
            with contextlib.suppress(asyncio.CancelledError):
                await listening
            for task in background.values():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait_for(task, 30)
    finally:
        await event_log.close()
        await pool.close()


class _Readiness:
    """``/readyz``: the projector loop runs and is not waiting out an outage, Kafka and Postgres
    answer; the projection lag goes to the report and the metrics. A projector task that ended
    (crashed or returned) is not ready whatever else holds; the report says why, and gives no
    lag (it owns no partitions then, so any figure would read as "caught up")."""

    def __init__(
        self, projector: LiveProjector, event_log: EventLog, pool: PgPool, metrics: Metrics,
        background: Mapping[str, asyncio.Task[None]], *, guard: LogGuard,
    ) -> None:  # fmt: skip
        self._projector, self._log, self._pool, self._metrics = projector, event_log, pool, metrics
        self._background, self._guard = background, guard

    def _running(self, name: str) -> bool:
        task = self._background.get(name)
        return task is not None and not task.done()

    def _ended(self, name: str) -> str | None:
        """Why the background task ``name`` is not running (None while it runs)."""
        task = self._background.get(name)
        if task is None:
            return "not started"
        if not task.done():
            return None
        if task.cancelled():
            return "cancelled"
        error = task.exception()
        return "exited" if error is None else f"crashed: {type(error).__name__}: {error}"

    async def __call__(self) -> dict[str, Any]:
        ended = self._ended("projector")
        report: dict[str, Any] = {"projector": self._projector.ready and ended is None}
        if ended is not None:
            report["projector_error"] = ended
        if "summarizer" in self._background:  # summaries are optional: contexts stay valid without them
            report["summarizer"] = self._running("summarizer")
        try:
            ends = await self._log.end_offsets()
            positions = self._projector.positions  # the partitions this process owns (a group shares them)
            lag = {p: max(0, ends[p] - o) for p, o in positions.items() if p in ends}
            for p, n in lag.items():
                self._metrics.projection_lag.labels(str(p)).set(n)
            report["log"], report["lag"] = True, sum(lag.values()) if ended is None else None
        except Exception as e:  # noqa: BLE001 - readiness reports any failure
            report["log"], report["log_error"] = False, str(e)
        try:
            async with self._pool.connection(timeout=2) as conn:
                await conn.execute("SELECT 1")
            report["postgres"] = True
        except Exception as e:  # noqa: BLE001
            report["postgres"], report["postgres_error"] = False, str(e)
        if self._guard.behind:  # appends are refused until an operator resolves it
            report["log_behind_read_models"] = self._guard.detail()
        ready = report["projector"] and report["log"] and report["postgres"] and not self._guard.behind
        report["ready"] = bool(ready)
        return report


def _report_crash(task: asyncio.Task[None]) -> None:
    """A background loop that died says so at once (readiness reports it too), not at shutdown."""
    if not task.cancelled() and task.exception() is not None:
        log.error("serve.task_failed", task=task.get_name(), error=repr(task.exception()))


def _retention_task(
    settings: Settings, pool: PgPool, event_log: EventLog, stop: asyncio.Event
) -> list[asyncio.Task[None]]:
    """Daily retention (``convlog retention``) when ``CONVLOG_RETENTION_IDLE_DAYS`` is set; archives
    go to ``CONVLOG_RETENTION_ARCHIVE_DIR`` (default ``DATA_DIR/retention``)."""
    idle_days, delay_s = settings.retention_idle_days, settings.retention_first_run_s
    archive_dir = settings.retention_archive
    if idle_days is None:
        return []
    from convlog.ops.retention import retention_schedule  # noqa: PLC0415 - only when retention is on

    producer = make_producer(event_log, settings, producer="convlog-retention")
    log.info("retention.scheduled", idle_days=idle_days, archive_dir=str(archive_dir), first_run_s=delay_s)
    schedule = retention_schedule(pool, event_log, producer, stop, idle_days=idle_days, archive_dir=archive_dir,
                                  first_delay_s=delay_s)  # fmt: skip
    return [asyncio.create_task(schedule)]


def http_server(app: Any, settings: Settings) -> uvicorn.Server:
    """The HTTP server (see :func:`~convlog.runtime.http_server.server_config` for its timeouts)."""
    return uvicorn.Server(server_config(app, settings))


def main(settings: Settings) -> None:
    async def run() -> None:
        async with running_service(settings) as service:
            if not service.deps.tokens:
                log.warning("serve.no_tokens", hint="set CONVLOG_API_TOKENS=tenant:token,... — every request is 401")
            server = http_server(create_app(service.deps), settings)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
            await server.serve()

    # uvloop: the same asyncio API on libuv, a cheaper loop for every socket the service serves.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run())
