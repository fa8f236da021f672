"""``convlog serve``: the HTTP API, and by default the projector and the summarizer, in one process.

Against Kafka and Postgres when configured, else the embedded log and an embedded Postgres.
With Kafka, ``--no-projector`` / ``--no-summarizer`` make it an API-only instance: stateless
(the log and Postgres hold everything), so any number of them run behind a load balancer while
``convlog project`` and ``convlog summarize`` processes scale on their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import structlog
import uvicorn
import uvloop

from convlog.resources import keyed_codec, migrated_database_url, opened_keys, service_pool
from convlog.runtime.http_server import listening_socket, server_config
from convlog.runtime.log_guard import LogGuard
from convlog.runtime.metrics_server import ProjectorCollector
from convlog.runtime.projecting import LiveProjector, checked_live_version, projector_session_limits
from convlog.runtime.readiness import Readiness
from convlog.runtime.summarizing import build_summarizer
from convlog.settings import Settings
from convlog.wiring import make_producer, open_event_log
from events.errors import ConfigurationError
from events.log import EventLog
from events.sealing.ports import KeyRing, KeyStore
from pgstore.pool import PgPool, database_identity, retrying
from pgstore.positions_listener import PositionsListener
from pgstore.reads import PostgresReadModels
from pgstore.versions import live_version, served_policies, version_policies
from projectors.gc_tuning import projection_gc
from projectors.positions_watch import PositionsWatch
from projectors.tokens import model_spec
from query_api.context_editing import policy_from_query
from query_api.http import ApiDeps, HttpSettings, create_app
from query_api.live import QueryService
from query_api.metrics import Metrics
from query_api.token_file import ApiTokens
from summarizer.runner import Summarizer

log = structlog.get_logger(__name__)


@dataclass
class Service:
    """Everything ``serve`` runs, built by :func:`running_service`; tests use it directly."""

    deps: ApiDeps
    projector: LiveProjector | None  # None on an API-only instance (--no-projector)
    summarizer: Summarizer | None
    pool: PgPool
    event_log: EventLog


class _LiveReads:
    """The live version's reads: looked up again at once when a switch is heard (the positions
    listener's ``on_switch``), and every few seconds anyway (a listener that is down hears none)."""

    def __init__(self, pool: PgPool, ttl_s: float = 5.0, *, keys: KeyRing | None = None) -> None:
        self._pool, self._ttl_s, self._keys = pool, ttl_s, keys
        self._reads: PostgresReadModels | None = None
        self._at = 0.0

    async def __call__(self) -> PostgresReadModels:
        if self._reads is None or time.monotonic() - self._at > self._ttl_s:
            async with self._pool.connection() as conn:
                live = await live_version(conn)
            if live is None:
                raise ConfigurationError("no live read-models version (run convlog migrate / convlog project)")
            if self._reads is None or self._reads.schema != live.schema:
                self._reads = PostgresReadModels(self._pool, schema=live.schema, version=live.version, keys=self._keys)
            self._at = time.monotonic()
        return self._reads

    def switched(self) -> None:
        """The live version may have changed: the next call looks it up."""
        self._at = -self._ttl_s - 1.0


async def _schema_of(reads: _LiveReads) -> str:
    return (await reads()).schema


def _switched(reads: _LiveReads, projector: LiveProjector | None) -> None:
    reads.switched()
    if projector is not None:
        projector.heard_switch()


def serve_roles(settings: Settings) -> list[str]:
    """What this ``serve`` process runs: the API always, the projector and the summarizer unless
    turned off (``--no-projector`` / ``--no-summarizer``, ``CONVLOG_PROJECTOR`` /
    ``CONVLOG_SUMMARIZER``), retention when scheduled. An API-only instance needs a log that
    other processes project: the embedded log is this process's alone, so no ``convlog
    project`` could — refused at start rather than serving a log nothing projects."""
    if settings.projector == "off" and not settings.kafka_bootstrap:
        raise ConfigurationError(
            "--no-projector (CONVLOG_PROJECTOR=off) needs Kafka (CONVLOG_KAFKA_BOOTSTRAP): the embedded log is "
            "opened by this process alone, so no `convlog project` could project it"
        )
    roles = ["api"]
    roles += ["projector"] if settings.projector == "on" else []
    roles += ["summarizer"] if settings.summarizer == "on" else []
    roles += ["retention"] if settings.retention_idle_days is not None else []
    return roles


def _api_deps(
    settings: Settings,
    pool: PgPool,
    event_log: EventLog,
    appending: EventLog,
    *,
    reads: _LiveReads,
    metrics: Metrics,
    guard: LogGuard,
    watch: PositionsWatch,
    readiness: Readiness,
    keys: KeyStore | None,
    tokens: ApiTokens,
) -> ApiDeps:
    """The API's query service (over ``event_log``), its producer (appending to ``appending``)
    and its HTTP settings."""
    default_encoding = settings.default_encoding
    model_spec("unknown-model", default_encoding=default_encoding)  # refuse a bad setting at start
    queries = QueryService(
        log=event_log,
        reads=reads,
        metrics=metrics,
        image_turns=settings.window_image_turns,
        editing=policy_from_query(settings.context_editing),
        default_encoding=default_encoding,
        counted_encodings=settings.counted_encodings(),
        # as_of: the window of the version that served the context (live when its event was projected)
        policy_at=served_policies(pool, settings.window_policy()),
        version_policy=version_policies(pool),
        max_event_bytes=settings.max_event_bytes,
        log_behind=guard.check_read,
        positions=watch,
        codec=keyed_codec(keys),
    )
    http = HttpSettings(
        tokens=tokens,
        max_body_bytes=settings.max_event_bytes * 2,
        body_timeout_s=settings.http_body_timeout_s,
        openai_user_id=settings.openai_user_id,
        request_log=settings.http_access_log,
    )
    producer = make_producer(appending, settings, producer="convlog-api", keys=keys)
    return ApiDeps(queries=queries, producer=producer, http=http, readiness=readiness, alive=readiness.alive)


@asynccontextmanager
async def running_service(settings: Settings) -> AsyncIterator[Service]:
    serve_roles(settings)  # refused before anything is created (a master key, a keys file)
    # The tokens before anything starts: a token file that cannot be read, or a token listed
    # twice, is a ConfigurationError. The key store next and closed last: every role seals or opens with it.
    tokens = api_tokens(settings)
    async with opened_keys(settings) as keys, _running(settings, keys, tokens) as service:
        yield service


def api_tokens(settings: Settings) -> ApiTokens:
    """``CONVLOG_API_TOKENS`` (app tokens) and ``CONVLOG_API_TOKENS_FILE``, as the API authenticates them."""
    return ApiTokens(
        settings.token_tenants(),
        file=settings.api_tokens_file,
        reload_s=settings.api_tokens_reload_s,
        app_erase=settings.app_tokens_erase,
    )


@asynccontextmanager
async def _running(settings: Settings, keys: KeyStore | None, tokens: ApiTokens) -> AsyncIterator[Service]:
    roles = serve_roles(settings)
    url = await migrated_database_url(settings)
    # A projecting serve's sessions get the projector's bounds (a frozen one must not hold its
    # partitions' locks from the next owner); the API's reads are well inside them.
    limits = projector_session_limits(settings) if "projector" in roles else None
    pool = await service_pool(url, name="convlog-serve", limits=limits)
    event_log = await open_event_log(settings)
    stop = asyncio.Event()
    try:
        # Kafka: a group member of its own; embedded: the log this process already opened.
        # It follows ``convlog rebuild --switch`` to the new live version.
        # The projector's commits wake read-your-writes requests of this process (no polling).
        watch = PositionsWatch()
        metrics = Metrics()
        projector = await _projector(settings, roles, pool, event_log, watch=watch, metrics=metrics, keys=keys)
        reads = _LiveReads(pool, keys=keys)
        # Read models ahead of the log (records lost from it): writers get a log that refuses appends.
        guard = await retrying(lambda: LogGuard.measure(event_log, reads), action="comparing the log and read models")
        appending = guard.appending(event_log)

        background: dict[str, asyncio.Task[None]] = {}
        readiness = Readiness(
            projector,
            event_log,
            pool,
            metrics,
            background,
            guard=guard,
            roles=roles,
            reads=reads,
            listening=lambda: watch.listening,
        )

        deps = _api_deps(
            settings,
            pool,
            event_log,
            appending,
            reads=reads,
            metrics=metrics,
            guard=guard,
            watch=watch,
            readiness=readiness,
            keys=keys,
            tokens=tokens,
        )
        summarizer = await _summarizer(settings, roles, pool, appending, metrics, keys=keys)
        background.update(
            _background(settings, projector=projector, summarizer=summarizer, pool=pool, appending=appending, stop=stop)
        )
        listening = _listening(url, watch, reads, projector, stop)
        try:
            yield Service(deps, projector, summarizer, pool, event_log)
        finally:
            await _stopped(stop, listening, background)
    finally:
        await event_log.close()
        await pool.close()


async def _projector(
    settings: Settings,
    roles: list[str],
    pool: PgPool,
    event_log: EventLog,
    *,
    watch: PositionsWatch,
    metrics: Metrics,
    keys: KeyRing | None,
) -> LiveProjector | None:
    """This process's projector, started on the live version; None for an API-only instance,
    which checks the live version as projectors do (so that it reads what they write). Either
    way the startup log says which roles this process runs, and which run elsewhere."""
    projector = None
    if "projector" in roles:
        projector = LiveProjector(settings, pool, event_log, on_committed=watch.committed, keys=keys)
        await projector.start_version()
        metrics.registry.register(ProjectorCollector(projector))
    else:
        await checked_live_version(pool, settings.topic, policy=settings.window_policy())
    elsewhere = [
        f"convlog {cmd}" for role, cmd in (("projector", "project"), ("summarizer", "summarize")) if role not in roles
    ]
    log.info(
        "serve.roles",
        roles=roles,
        host=socket.gethostname(),
        port=settings.http_port,
        **({"run_elsewhere": elsewhere} if elsewhere else {}),
    )
    return projector


def _listening(
    url: str, watch: PositionsWatch, reads: _LiveReads, projector: LiveProjector | None, stop: asyncio.Event
) -> asyncio.Task[None]:
    """Every projector's commits (other processes' too: a Kafka group shares the partitions).
    A switch reaches this process's reads and projector at its commit (their polls: fallbacks)."""
    listener = PositionsListener(url, watch, lambda: _schema_of(reads), on_switch=lambda: _switched(reads, projector))
    return asyncio.create_task(listener.run(stop), name="positions-listener")


async def _summarizer(
    settings: Settings, roles: list[str], pool: PgPool, appending: EventLog, metrics: Metrics, *, keys: KeyStore | None
) -> Summarizer | None:
    """This process's summarizer, or None when it runs elsewhere (``--no-summarizer``)."""
    if "summarizer" not in roles:
        return None
    database = ""
    if settings.kafka_bootstrap:
        database = await retrying(lambda: database_identity(pool), action="identifying the database")
    return build_summarizer(settings, pool, appending, registry=metrics.registry, database=database, keys=keys)


def _background(
    settings: Settings,
    *,
    projector: LiveProjector | None,
    summarizer: Summarizer | None,
    pool: PgPool,
    appending: EventLog,
    stop: asyncio.Event,
) -> dict[str, asyncio.Task[None]]:
    """The loops this process runs beside the API, started, by name (readiness reports them)."""
    background: dict[str, asyncio.Task[None]] = {}
    if projector is not None:
        background["projector"] = asyncio.create_task(projector.run(stop), name="projector")
    if summarizer is not None:
        background["summarizer"] = asyncio.create_task(summarizer.run(stop), name="summarizer")
    for task in _retention_task(settings, pool, appending, stop):
        background["retention"] = task
    for task in background.values():
        task.add_done_callback(_report_crash)
    return background


async def _stopped(
    stop: asyncio.Event, listening: asyncio.Task[None], background: dict[str, asyncio.Task[None]]
) -> None:
    """Stop the background loops: each finishes what it has in flight (30 s at most)."""
    stop.set()
    listening.cancel()  # it may sit in a wait for notifications; nothing to finish
    with contextlib.suppress(asyncio.CancelledError):
        await listening
    for task in background.values():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)


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
    from convlog.jobs.retention import retention_schedule  # noqa: PLC0415 - only when retention is on

    producer = make_producer(event_log, settings, producer="convlog-retention")
    log.info("retention.scheduled", idle_days=idle_days, archive_dir=str(archive_dir), first_run_s=delay_s)
    schedule = retention_schedule(
        pool, event_log, producer, stop, idle_days=idle_days, archive_dir=archive_dir, first_delay_s=delay_s
    )
    return [asyncio.create_task(schedule)]


def http_server(app: Any, settings: Settings) -> uvicorn.Server:
    """The HTTP server (see :func:`~convlog.runtime.http_server.server_config` for its timeouts)."""
    return uvicorn.Server(server_config(app, settings))


def main(settings: Settings) -> None:
    listening = listening_socket(settings)  # first: a port in use starts nothing

    async def run() -> None:
        async with running_service(settings) as service:
            if not service.deps.http.tokens:
                log.warning(
                    "serve.no_tokens",
                    hint="set CONVLOG_API_TOKENS=tenant:token,... or CONVLOG_API_TOKENS_FILE — every request is 401",
                )
            server = http_server(create_app(service.deps), settings)
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
            with projection_gc():  # its projector's batches and its requests alike
                await server.serve(sockets=[listening])

    # uvloop: the same asyncio API on libuv, a cheaper loop for every socket the service serves.
    with listening, asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(run())
