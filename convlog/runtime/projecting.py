"""``convlog project``: run the read-model projector against the configured log and Postgres."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping

import structlog
from prometheus_client import CollectorRegistry

from convlog.interruptible import run_interruptibly
from convlog.resources import keyed_codec, migrated_database_url, opened_keys, projector_group, service_pool
from convlog.runtime.metrics_server import ProjectorCollector, start_metrics_endpoint
from convlog.settings import Settings
from convlog.wiring import ensure_kafka_topic, open_event_log
from events.log import EventLog
from events.sealing.ports import KeyRing
from pgstore.pool import PgPool, SessionLimits, database_identity, retrying
from pgstore.positions_listener import PositionsListener
from pgstore.stalled_sessions import watch_stalled_blockers
from pgstore.store import PostgresProjectionStore
from pgstore.topics import claim_topic
from pgstore.versions import ProjectionVersion, ensure_live_version, live_version
from projectors.gc_tuning import projection_gc
from projectors.kafka_source import KafkaGroupSource
from projectors.log_source import LogSource
from projectors.ports import RecordSource
from projectors.runner import Projector, ProjectorStats
from projectors.tokens import TokenCounter
from projectors.window import WindowPolicy

log = structlog.get_logger(__name__)

POOL_NAME = "convlog-projector"  # its sessions' application_name
# The application names of processes that project (``convlog project``, ``convlog serve`` with its
# projector): a stalled session of one that blocks another's batch is ended (pgstore.stalled_sessions).
PROJECTING_APPLICATIONS = (POOL_NAME, "convlog-serve")


def projector_session_limits(settings: Settings) -> SessionLimits:
    """What a projector's Postgres sessions may wait for and idle in a transaction: a frozen
    projector's locks are released, and its successor's batch fails (retriable) instead of
    waiting on them for minutes."""
    return SessionLimits(
        lock_timeout_s=settings.projector_lock_timeout_s,
        statement_timeout_s=settings.projector_statement_timeout_s,
        idle_in_transaction_timeout_s=settings.projector_idle_in_transaction_timeout_s,
    )


def build_projector(
    settings: Settings,
    pool: PgPool,
    schema: str,
    event_log: EventLog | None,
    *,
    on_committed: Callable[[Mapping[int, int]], None] | None = None,
    policy: WindowPolicy | None = None,
    database: str = "",
    keys: KeyRing | None = None,
) -> Projector:
    """A projector for ``schema``: a Kafka consumer group member when Kafka is configured, else a
    reader of ``event_log`` (the embedded log, which only one process may open). ``on_committed``
    hears each committed batch's positions (``convlog serve`` wakes read-your-writes waiters).
    ``policy``: the window policy of the version ``schema`` holds (default: the settings').
    ``database``: the pool's :func:`~pgstore.pool.database_identity`, for the group's name
    (needed with Kafka)."""
    source: RecordSource
    if settings.kafka_bootstrap:
        if not database:
            raise ValueError("a Kafka projector's group is named for its database: pass database_identity(pool)")
        source = KafkaGroupSource(
            bootstrap=settings.kafka_bootstrap,
            topic=settings.topic,
            group_id=projector_group(settings.topic, database, schema),
            # How long a crashed member keeps its partitions before the group moves them.
            session_timeout_ms=settings.kafka_session_timeout_ms,
            heartbeat_interval_ms=1000,
            group_instance_id=settings.projector_instance_id,
        )
    elif event_log is not None:
        source = LogSource(event_log)
    else:
        raise ValueError("the embedded log must be passed in: only one process may open it")
    store = PostgresProjectionStore(
        pool,
        schema=schema,
        codec=keyed_codec(keys),
        counter=TokenCounter(encodings=settings.counted_encodings()),
        policy=policy or settings.window_policy(),
        max_event_bytes=settings.max_event_bytes,
        notify_positions=True,  # API processes elsewhere wake read-your-writes waits on it
        keys=keys,
    )
    # A revocation waits for the batch in flight, but well within the rebalance timeout (aiokafka:
    # the session timeout), or the broker would drop this member from the group.
    revoke_wait_s = settings.kafka_session_timeout_ms / 2000
    return Projector(source, store, on_committed=on_committed, revoke_wait_s=revoke_wait_s)


async def checked_live_version(pool: PgPool, topic: str, *, policy: WindowPolicy) -> ProjectionVersion:
    """The live read-models version (the first one created if none is, made with ``policy``),
    checked to be one of ``topic``: its positions are offsets of one topic, so another is
    refused (a clear error at start); a window ``policy`` other than the version's is logged.
    Projectors and API-only ``serve`` instances both start here."""
    version = await retrying(lambda: ensure_live_version(pool, policy=policy), action="finding the live version")
    await retrying(lambda: claim_topic(pool, version, topic), action="checking the topic")
    warn_if_policy_differs(version, policy)
    return version


class LiveProjector:
    """Projects into whichever read-models version is live, and follows a switch.

    ``convlog rebuild --switch`` makes another version live while this process runs. The
    projector of the old version is stopped (its batch in flight completes or rolls back as a
    whole), and a projector of the new version starts from the positions stored in the new
    version's own schema — so the hand-over skips and repeats nothing. With Kafka each version
    has its own consumer group; the old group is left as the old projector stops.
    """

    def __init__(
        self,
        settings: Settings,
        pool: PgPool,
        event_log: EventLog | None,
        *,
        poll_s: float | None = None,
        on_committed: Callable[[Mapping[int, int]], None] | None = None,
        keys: KeyRing | None = None,
    ) -> None:
        self._settings, self._pool, self._event_log = settings, pool, event_log
        self._keys = keys
        self._on_committed = on_committed
        self._database = ""  # database_identity(pool), read once, when a Kafka group is first joined
        self._poll_s = poll_s if poll_s is not None else settings.version_poll_s
        self._switch_heard = asyncio.Event()  # set by heard_switch: look at the live version now
        self.current: Projector | None = None
        self.schema: str | None = None
        self.version: ProjectionVersion | None = None

    @property
    def ready(self) -> bool:
        return self.current is not None and self.current.ready

    @property
    def positions(self) -> Mapping[int, int]:
        return self.current.positions if self.current is not None else {}

    @property
    def stats(self) -> ProjectorStats:
        return self.current.stats if self.current is not None else ProjectorStats()

    async def start_version(self) -> str:
        """Pick the live version (creating the first one) and build its projector."""
        policy = self._settings.window_policy()  # a new version's; an existing one keeps its own
        version = await checked_live_version(self._pool, self._settings.topic, policy=policy)
        if self._settings.kafka_bootstrap and not self._database:
            self._database = await retrying(lambda: database_identity(self._pool), action="identifying the database")
        self.current = build_projector(
            self._settings,
            self._pool,
            version.schema,
            self._event_log,
            on_committed=self._on_committed,
            policy=version.policy,
            database=self._database,
            keys=self._keys,
        )
        self.schema, self.version = version.schema, version
        return version.schema

    async def run(self, stop: asyncio.Event) -> None:
        """Project until ``stop`` is set. With Kafka, other processes may own these partitions
        next: meanwhile a stalled session (a frozen process's) that blocks this one's batches is
        ended, see :mod:`pgstore.stalled_sessions`."""
        stalled_s = self._settings.projector_idle_in_transaction_timeout_s
        if not (self._settings.kafka_bootstrap and stalled_s):
            return await self._run(stop)
        watching = asyncio.Event()
        watch = asyncio.create_task(
            watch_stalled_blockers(self._pool, watching, applications=PROJECTING_APPLICATIONS, stalled_s=stalled_s)
        )
        try:
            await self._run(stop)
        finally:
            watching.set()
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch

    async def _run(self, stop: asyncio.Event) -> None:
        schema = self.schema if self.current is not None else await self.start_version()
        while True:
            assert self.current is not None
            assert schema is not None
            inner = asyncio.Event()  # set by ``stop`` or by a switch away from ``schema``
            watcher = asyncio.create_task(self._watch(schema, stop, inner))
            log.info("projector.start", schema=schema, kafka=bool(self._settings.kafka_bootstrap))
            try:
                await self.current.run(inner)
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            if stop.is_set():
                return
            log.info("projector.switched", old_schema=schema)
            schema = await self.start_version()

    def heard_switch(self) -> None:
        """A switch of the live version was heard (the positions listener of ``convlog serve`` or
        ``convlog project``): look at once, not at the next poll, so the new version is projected
        from its commit on."""
        self._switch_heard.set()

    async def _watch(self, schema: str, stop: asyncio.Event, inner: asyncio.Event) -> None:
        while True:
            woken = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._switch_heard.wait())]
            try:
                await asyncio.wait(woken, timeout=self._poll_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in woken:
                    waiting.cancel()
            self._switch_heard.clear()
            if stop.is_set():
                break
            try:
                async with self._pool.connection() as conn:
                    live = await live_version(conn)
            except Exception as e:  # noqa: BLE001 - a Postgres outage must not stop the projector
                log.warning("projector.version_check_failed", error=str(e))
                continue
            if live is not None and live.schema != schema:
                break
        inner.set()


def warn_if_policy_differs(version: ProjectionVersion, settings_policy: WindowPolicy) -> None:
    """The settings name another window than the version was made with: the version keeps its own
    (its windows and every context it served stay reproducible); the settings apply to the next
    ``convlog rebuild``, which is how the window is changed (blue/green)."""
    if version.policy != settings_policy:
        log.warning(
            "window_policy_differs",
            schema=version.schema,
            version_policy=f"{version.policy.max_turns}->{version.policy.keep_turns}",
            settings_policy=f"{settings_policy.max_turns}->{settings_policy.keep_turns}",
            hint="the live version keeps its window policy; the settings apply to the next convlog rebuild",
        )


async def run_projector(settings: Settings, stop: asyncio.Event) -> LiveProjector:
    """Project into the live read-models version until ``stop`` is set, following switches."""
    # The topic must exist before the group subscribes (it would not see it created later);
    # made sure of beside the migration, so that a restarted projector waits for neither twice.
    # The key store (its topic and records) loads beside both: a restart waits for it once.
    stack = contextlib.AsyncExitStack()
    topic = asyncio.create_task(ensure_kafka_topic(settings, client_id="convlog-projector"))
    opening = asyncio.create_task(stack.enter_async_context(opened_keys(settings)))
    try:
        url = await migrated_database_url(settings)  # may start the embedded Postgres; waits out an outage
        keys = await opening
    except BaseException:
        opening.cancel()
        with contextlib.suppress(BaseException):
            await opening
        await stack.aclose()
        raise
    finally:
        await topic
    limits = projector_session_limits(settings)
    event_log = None
    try:
        pool = await service_pool(url, name=POOL_NAME, limits=limits)
    except BaseException:
        await stack.aclose()
        raise
    try:
        if not settings.kafka_bootstrap:
            event_log = await open_event_log(settings)
        projector = LiveProjector(settings, pool, event_log, keys=keys)
        registry = CollectorRegistry()
        registry.register(ProjectorCollector(projector))
        start_metrics_endpoint(registry, settings)
        # A switch is heard at its commit (rebuild --switch NOTIFYs it): no wait for the next poll.
        switches = asyncio.create_task(PositionsListener(url, None, on_switch=projector.heard_switch).run(stop))
        try:
            with projection_gc():
                await projector.run(stop)
        finally:
            switches.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await switches
        return projector
    finally:
        await stack.aclose()
        if event_log is not None:
            await event_log.close()
        await pool.close()


def main(settings: Settings) -> int:
    """``convlog project``: until SIGINT/SIGTERM (a second one aborts the batch in flight)."""

    async def run(stop: asyncio.Event) -> int:
        await run_projector(settings, stop)
        return 0

    return run_interruptibly(run)
