"""``convlog rebuild`` and ``convlog drop``: blue/green versions of a projection.

A rebuild fills a ``building`` version's schema from offset 0 with the ordinary projector (one
transaction per batch, COPY for the insert-only tables, positions in the version's own schema)
reading the log through a group-less consumer with plain assignment that never commits: the
live projector's consumer group and its version are never touched. Ctrl-C lets the batch in
flight commit and stops; running the command again resumes from the stored positions.

Which version: ``--version N`` resumes (or switches) building version N. Without it the latest
unfinished (``building``) version is resumed if there is one — an operator who pressed Ctrl-C and
runs the same command again expects it to go on, not to start over — else a new version is
created. ``--new`` always creates one: after deploying changed projection code, a version that
the old code half-built must not be resumed.

``--switch`` catches up once more to the log's end as of that moment, then makes the version
live in one transaction and retires the old one (kept until ``convlog drop``). The live
projectors (``convlog project`` / ``serve``) poll the registry, stop projecting the old
version and continue the new one from the positions stored in its schema — no event is skipped
or applied twice, whatever arrived after the last catch-up. Reads follow within seconds.

A poison record fails a rebuild (exit 2, naming its coordinates) instead of being parked
quietly: ``--park-poison`` parks it the way the live projector does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from convlog.interruptible import INTERRUPTED
from convlog.ops.common import following, progress_bar, say
from convlog.ops.rebuild_protocol import load_counter, make_store, poison_stop
from convlog.ops.rebuild_sharing import build_sharing
from convlog.ops.verifying import compare_settled, uncounted_encodings
from convlog.resources import opened_keys, ops_resources, resolved_database_url
from convlog.settings import Settings
from events.errors import ConfigurationError
from events.log import EventLog
from pgstore import registry
from pgstore.locks import session_lock
from pgstore.pool import PgPool, open_pool
from pgstore.positions import stored_positions
from pgstore.store import PostgresProjectionStore
from pgstore.topics import claim_topic
from pgstore.versions import READ_MODELS, ProjectionVersion
from projectors.errors import ProjectionError, VersionBusyError
from projectors.fold import PoisonRecordError
from projectors.gc_tuning import projection_gc
from projectors.log_source import LogSource
from projectors.ports import ProjectionStore
from projectors.runner import Projector
from projectors.window import WindowPolicy

PROJECTIONS = (READ_MODELS,)
DEFAULT_WORKERS = min(4, os.cpu_count() or 1)
# A worker process costs about a second to start (imports, tiktoken tables, connections): below
# this many records per worker one process is faster (measured with bench/rebuild.py, 2 cores).
RECORDS_PER_WORKER = 50_000


@dataclass(frozen=True, slots=True)
class RebuildOptions:
    projection: str = READ_MODELS
    version: int | None = None
    new: bool = False
    verify: bool = False
    switch: bool = False
    park_poison: bool = False
    batch_size: int = 5000
    workers: int | None = None  # None: see worker_count


def check_projection(projection: str) -> None:
    if projection not in PROJECTIONS:
        raise ConfigurationError(f"unknown projection {projection!r} (known: {', '.join(PROJECTIONS)})")


async def rebuild(settings: Settings, opts: RebuildOptions, stop: asyncio.Event) -> int:
    check_projection(opts.projection)
    counter = load_counter(settings)
    async with (
        ops_resources(settings, name="convlog-rebuild", read_only=True) as (pool, event_log),
        opened_keys(settings, read_only=True) as keys,
    ):
        target = await choose_version(pool, opts, settings_policy=settings.window_policy())
        await claim_topic(pool, target, settings.topic)  # a version resumed on another topic is refused
        tokens = await counter
        async with building(pool, target):
            store = await make_store(settings, pool, target.schema, tokens, park_poison=opts.park_poison, keys=keys)
            if store.skips:
                say(f"skipping the {len(store.skips)} record(s) an operator skipped in the live version, as it did")
            if not await build(settings, event_log, store, stop, opts=opts, desc=f"rebuild v{target.version}"):
                say(f"interrupted: version {target.version} keeps what it built; run the command again to resume")
                return INTERRUPTED
            live = await registry.live(pool, opts.projection)
            assert live is not None  # choose_version refused a projection without one
            if opts.verify:
                uncounted = uncounted_encodings(settings)
                result = await compare_settled(pool, live.schema, target.schema, uncounted=uncounted)
                say(result.describe(checked=target.schema, reference=live.schema))
                if result.differing:
                    say("not switching: the versions differ" if opts.switch else "the versions differ")
                    return 1
            if not opts.switch:
                say(
                    f"version {target.version} built; make it live with: "
                    f"convlog rebuild {opts.projection} --version {target.version} --switch"
                )
                return 0
            live_read = await stored_positions(pool, live.schema)  # before the log end the catch-up reads
            # Catch up to the log's end once more so that reads of the new version start fresh; what
            # arrives after this the live projector applies once it followed the switch. (A new store:
            # it takes the skips an operator made in the live version meanwhile.)
            store = await make_store(settings, pool, target.schema, tokens, park_poison=opts.park_poison, keys=keys)
            if not await build(settings, event_log, store, stop, opts=opts, desc="catch up"):
                say(f"interrupted before the switch: version {target.version} is still building")
                return INTERRUPTED
            await check_not_behind(store, live_read, settings.topic)
            await registry.make_live(pool, opts.projection, target.version)
            say(
                f"version {target.version} is live; version {live.version} is retired "
                f"(remove it with: convlog drop {opts.projection} --version {live.version})"
            )
            return 0


async def check_not_behind(store: PostgresProjectionStore, live_read: Mapping[int, int], topic: str) -> None:
    """Refuse to switch to a version that read less of the log than the live one had read before
    the catch-up began: the rebuild then read another log (a wrong ``CONVLOG_TOPIC``, say)."""
    reached = await store.positions(sorted(live_read))
    behind = sorted(p for p, o in live_read.items() if reached[p] < o)
    if behind:
        raise ProjectionError(
            f"not switching: after catching up to the end of {topic}, the new version is still behind the live one "
            f"on partitions {behind}; is CONVLOG_TOPIC the live projector's topic?"
        )


async def choose_version(pool: PgPool, opts: RebuildOptions, *, settings_policy: WindowPolicy) -> ProjectionVersion:
    """The version to build: the one named, an unfinished one (each keeps the window policy it
    was made with), or a new one made with ``settings_policy``, the settings' window."""
    known = await registry.known_versions(pool, opts.projection)
    live = next((v for v in known if v.status == "live"), None)
    if live is None:
        raise ConfigurationError(
            f"{opts.projection} has no live version yet: convlog project (or serve) creates one; "
            "rebuild builds a new version beside it"
        )
    if opts.version is not None:
        chosen = next((v for v in known if v.version == opts.version), None)
        if chosen is None:
            listed = ", ".join(f"{v.version} ({v.status})" for v in known)
            raise ProjectionError(f"{opts.projection} has no version {opts.version} (versions: {listed})")
        if chosen.status != "building":
            raise ProjectionError(
                f"version {chosen.version} is {chosen.status}, not building: omit --version to build a new one"
            )
        say(f"resuming version {chosen.version} ({chosen.schema}) from its stored positions")
        return chosen
    building = [v for v in known if v.status == "building"]
    if building and not opts.new:
        chosen = building[-1]
        say(f"resuming unfinished version {chosen.version} ({chosen.schema}); pass --new to start a fresh one")
        return chosen
    created = await registry.new_version(pool, opts.projection, policy=settings_policy)
    say(
        f"building version {created.version} ({created.schema}) beside live version {live.version}"
        f"{policy_change(live.policy, created.policy)}"
    )
    return created


def policy_change(live: WindowPolicy, new: WindowPolicy) -> str:
    """How a new version's window differs from the live one's (its windows table differs too)."""
    if live == new:
        return ""
    return (
        f", window {live.max_turns} -> {live.keep_turns} turns becoming "
        f"{new.max_turns} -> {new.keep_turns} (CONVLOG_WINDOW_MAX_TURNS / KEEP_TURNS)"
    )


@contextlib.asynccontextmanager
async def building(pool: PgPool, target: ProjectionVersion) -> AsyncIterator[None]:
    """One rebuild of a version at a time: a second one would redo the same batches only to lose
    every position check (correct, but wasted) and show a progress bar that means nothing.
    A session-level advisory lock on a connection held for the whole rebuild: it goes away with
    the process, however that ends."""
    async with session_lock(pool, f"convlog.rebuild.{target.schema}") as held:
        if not held:
            raise VersionBusyError(
                f"version {target.version} ({target.schema}) is being built by another convlog rebuild right now; "
                "wait for it to end, or stop it and run this again: it resumes from the stored positions"
            )
        yield


def worker_count(settings: Settings, opts: RebuildOptions, records: int) -> int:
    if not settings.kafka_bootstrap:
        return 1  # the embedded log admits one process
    if opts.workers is not None:
        return opts.workers
    return max(1, min(DEFAULT_WORKERS, records // RECORDS_PER_WORKER))


async def build(
    settings: Settings,
    event_log: EventLog,
    store: ProjectionStore,
    stop: asyncio.Event,
    *,
    opts: RebuildOptions,
    desc: str,
) -> bool:
    """Project into ``store`` up to the log's end as of now; False if ``stop`` came first.

    Decoding, token counting and folding are CPU-bound Python: with Kafka, :func:`worker_count`
    processes build disjoint sets of partitions side by side (a conversation lives on one
    partition, and positions are per partition, so their transactions never touch the same rows):
    this one from the start, the others as they are ready (:mod:`convlog.ops.rebuild_sharing`).
    """
    until = await event_log.end_offsets()
    start = await store.positions(sorted(until))
    todo = {p: o for p, o in until.items() if o > start[p]}
    reached = dict(start)

    async def done() -> int:
        reached.update(await store.positions(sorted(until)))
        return sum(max(0, min(reached[p], o) - start[p]) for p, o in until.items())

    bar = progress_bar(sum(o - start[p] for p, o in todo.items()), desc)
    workers = min(worker_count(settings, opts, sum(o - start[p] for p, o in todo.items())), len(todo))
    try:
        async with following(bar, done):
            with projection_gc():
                await _project(settings, event_log, store, stop, todo, workers=workers, opts=opts)
    except PoisonRecordError as e:
        raise poison_stop(e) from e
    return all(reached[p] >= o for p, o in until.items())


async def _project(
    settings: Settings,
    event_log: EventLog,
    store: ProjectionStore,
    stop: asyncio.Event,
    todo: Mapping[int, int],
    *,
    workers: int,
    opts: RebuildOptions,
) -> None:
    if workers > 1:
        await build_sharing(
            settings,
            event_log,
            store,
            todo,
            workers=workers,
            batch_size=opts.batch_size,
            park_poison=opts.park_poison,
            stop=stop,
        )
    elif todo:
        projector = Projector(LogSource(event_log, todo), store, batch_size=opts.batch_size, fetch_timeout_s=0.2)
        await projector.run(stop, until=dict(todo))


async def drop(settings: Settings, projection: str, version: int) -> int:
    check_projection(projection)
    url = await resolved_database_url(settings)
    pool = await open_pool(url, max_size=1, name="convlog-drop")

    def droppable(schema: str | None, status: str | None) -> None:
        if schema is None:
            raise ProjectionError(f"{projection} has no version {version}")
        if status == "live":
            raise ProjectionError(
                f"version {version} of {projection} is live and cannot be dropped; "
                f"make another version live first (convlog rebuild {projection} --switch)"
            )

    try:
        schema, status = await registry.drop_version(pool, projection, version, check=droppable)
    finally:
        await pool.close()
    say(f"dropped {projection} version {version} ({schema}, was {status})")
    return 0
