"""``convlog retention``: archive, then erase, conversations idle for longer than N days.

Sessions expire and tables must not grow forever (seeds 003 and 004). Order matters: the
archive (what an auditor can still read) is written, fsynced and renamed into place first;
only then is a ``ConversationErased`` event appended through the producer for each idle
conversation, so the log stays the source of truth. Its ``reason`` records why (idle days,
last event, archive file). Event ids derive from the conversation and its last offset: a
rerun after a crash cannot erase twice, and a conversation that moved on is a new decision.

Idle = the last event (any type) is older than the cutoff and there is something left to
erase (never erased, or events after the last erasure). Selection waits until the live
projection has caught up with the log as of the start, so a conversation with recent events
the projection has not seen yet is not taken for idle; and a conversation written to while the
run selected and archived it is left alone. Each erase is conditional on the conversation's
last event still being the one judged idle (``ConversationErased.only_if_last_offset``): one
written to between that last check and its erase event keeps everything, as the projection
decides in log order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import structlog
from tqdm import tqdm

from convlog.jobs.export import ExportFilter, export_transcripts
from events.durable import fsync_directory
from events.errors import ConfigurationError, ConvlogError
from events.keys import ConversationKey
from events.log import EventLog
from events.producer import ConversationProducer
from pgstore import registry, transcripts
from pgstore.errors import driver_errors
from pgstore.locks import session_lock
from pgstore.pool import PgPool, pg_errors
from pgstore.positions import stored_positions

_EVENT_ID_NAMESPACE = uuid.UUID("0b7d6c1e-3f0a-4d8e-9a52-6a2f3c1d9e01")
_LOCK = "convlog.retention"


class RetentionError(ConvlogError):
    code = "retention_error"


class ProjectionBehindError(RetentionError):
    """The live projection has not reached the log's end yet: idle cannot be told reliably."""

    code = "projection_behind"
    retriable = True


@dataclass(frozen=True, slots=True)
class IdleConversation:
    key: str
    last_event_at: datetime
    partition: int
    last_offset: int

    def erase_event_id(self) -> str:
        return str(uuid.uuid5(_EVENT_ID_NAMESPACE, f"retention:{self.key}:{self.partition}:{self.last_offset}"))


@dataclass(frozen=True, slots=True)
class RetentionReport:
    idle: list[IdleConversation]
    archive: Path | None  # None on a dry run or when nothing was idle
    archived_messages: int
    erased: int
    woke: list[str] = field(default_factory=list)  # archived, but written to meanwhile: not erased


async def idle_conversations(pool: PgPool, schema: str, *, cutoff: datetime) -> list[IdleConversation]:
    with pg_errors("find idle conversations"):
        rows = await transcripts.idle_conversations(pool, schema, cutoff=cutoff)
    return [IdleConversation(*row) for row in rows]


async def wait_for_projection(pool: PgPool, schema: str, ends: dict[int, int], *, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        with pg_errors("read the projection positions"):
            stored = await stored_positions(pool, schema)
        behind = {p: (stored.get(p, 0), end) for p, end in ends.items() if stored.get(p, 0) < end}
        if not behind:
            return
        if time.monotonic() > deadline:
            lag = sum(end - at for at, end in behind.values())
            raise ProjectionBehindError(
                f"the projection is {lag} record(s) behind the log on {len(behind)} partition(s); "
                "retention runs once it has caught up (is `convlog project` running?)"
            )
        await asyncio.sleep(0.5)


@contextlib.asynccontextmanager
async def _single_run(pool: PgPool) -> AsyncIterator[None]:
    """One retention run at a time across processes (every `serve` may schedule one)."""
    with driver_errors("take the retention lock"):
        async with session_lock(pool, _LOCK) as held:
            if not held:
                raise RetentionError("another retention run holds the lock; try again later")
            yield


def archive_path(target: Path, now: datetime) -> Path:
    """A directory gets a timestamped file in it; a file path is used as it is, never overwritten."""
    path = target / f"retention-{now:%Y%m%dT%H%M%SZ}.jsonl" if target.is_dir() else target
    if path.exists():
        raise ConfigurationError(f"the archive {path} exists already; an archive is never overwritten")
    return path


async def _write_archive(
    pool: PgPool, schema: str, path: Path, idle: list[IdleConversation], manifest: dict[str, object], *, progress: bool
) -> int:
    """Write to ``<path>.partial``, fsync, rename: the archive exists completely or not at all."""
    partial = path.with_name(path.name + ".partial")
    try:
        with partial.open("x", encoding="utf-8") as out:
            out.write(json.dumps({"archive": manifest, "conversations": [c.key for c in idle]}, default=str) + "\n")
            written = await export_transcripts(
                pool,
                schema,
                ExportFilter(tenant=None, conversation_keys=[c.key for c in idle]),
                out,
                progress=progress,
                keep_sealed=True,  # the archive holds ciphertext only: erasing the subject shreds it too
            )
            out.flush()
            os.fsync(out.fileno())
        partial.rename(path)
        fsync_directory(path.parent)
    except OSError as e:
        partial.unlink(missing_ok=True)
        raise RetentionError(f"cannot write the archive {path}: {e}; nothing was erased") from e
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return written


async def run_retention(
    pool: PgPool,
    schema: str,
    event_log: EventLog,
    producer: ConversationProducer,
    *,
    idle_days: int,
    archive: Path,
    dry_run: bool,
    wait_s: float = 60.0,
    concurrency: int = 32,
    progress: bool = True,
) -> RetentionReport:
    if idle_days < 1:
        raise ConfigurationError(f"--idle-days must be >= 1, got {idle_days}")
    now = datetime.now(UTC)
    cutoff = now - timedelta(days=idle_days)
    async with _single_run(pool):
        started_at = await event_log.end_offsets()
        await wait_for_projection(pool, schema, started_at, timeout_s=wait_s)
        idle = await idle_conversations(pool, schema, cutoff=cutoff)
        if dry_run or not idle:
            return RetentionReport(idle, None, 0, 0)
        path = archive_path(archive, now)
        manifest = {
            "made_by": "convlog retention",
            "created_at": now.isoformat(),
            "idle_days": idle_days,
            "cutoff": cutoff.isoformat(),
            "schema": schema,
        }
        archived = await _write_archive(pool, schema, path, idle, manifest, progress=progress)
        # Someone wrote to an idle conversation while it was selected and archived: it is not idle.
        woke = await active_since(event_log, started_at, {c.key for c in idle})
        erase = [c for c in idle if c.key not in woke]
        erased = await _erase(
            producer, erase, idle_days=idle_days, archive=path, concurrency=concurrency, progress=progress
        )
        return RetentionReport(idle, path, archived, erased, sorted(woke))


async def active_since(
    event_log: EventLog, since: dict[int, int], keys: set[str], *, timeout_s: float = 60.0
) -> set[str]:
    """The conversations among ``keys`` with a record at or after ``since`` (partition -> offset),
    up to the log's end now. Reads only what was appended meanwhile (normally little)."""
    by_raw = {ConversationKey.parse(k).encode(): k for k in keys}
    ends = await event_log.end_offsets()
    positions = {p: o for p, o in since.items() if ends.get(p, 0) > o}
    active: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while positions:
        if time.monotonic() > deadline:
            raise RetentionError("could not read the records appended during the run in time; nothing was erased")
        batch = await event_log.read(positions, max_records=1000, timeout_s=1.0)
        for record in batch.records:
            if record.offset < ends[record.partition] and record.key in by_raw:
                active.add(by_raw[record.key])
        # The read's positions, not the last record + 1: they move past transaction markers.
        positions = {p: max(o, batch.positions.get(p, o)) for p, o in positions.items()}
        positions = {p: o for p, o in positions.items() if o < ends[p]}
    return active


async def _erase(
    producer: ConversationProducer,
    idle: list[IdleConversation],
    *,
    idle_days: int,
    archive: Path,
    concurrency: int,
    progress: bool,
) -> int:
    gate = asyncio.Semaphore(concurrency)
    bar = tqdm(total=len(idle), unit="conv", desc="erase", disable=not progress, leave=False)

    async def erase(c: IdleConversation) -> None:
        reason = (
            f"retention: idle for more than {idle_days} days (last event {c.last_event_at.isoformat()}); "
            f"archived in {archive.name}"
        )
        async with gate:
            await producer.erase(
                ConversationKey.parse(c.key),
                reason=reason,
                event_id=c.erase_event_id(),
                only_if_last_offset=c.last_offset,
            )
        bar.update(1)

    try:
        await asyncio.gather(*(erase(c) for c in idle))
    finally:
        bar.close()
    return len(idle)


async def retention_schedule(
    pool: PgPool,
    event_log: EventLog,
    producer: ConversationProducer,
    stop: asyncio.Event,
    *,
    idle_days: int,
    archive_dir: Path,
    first_delay_s: float = 60.0,
    interval_s: float = 24 * 3600.0,
) -> None:
    """What ``convlog serve`` runs when ``CONVLOG_RETENTION_IDLE_DAYS`` is set: a retention run
    ``first_delay_s`` after the start (the projector catches up meanwhile), then one every
    ``interval_s``. A failed run is logged and retried at the next slot; it never stops serving."""
    log = structlog.get_logger(__name__)
    delay = first_delay_s
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
            return  # stopping
        delay = interval_s
        try:
            with pg_errors("look up the live read-models version"):
                live = await registry.live(pool)
            if live is None:
                continue
            await asyncio.to_thread(archive_dir.mkdir, parents=True, exist_ok=True)
            report = await run_retention(
                pool,
                live.schema,
                event_log,
                producer,
                idle_days=idle_days,
                archive=archive_dir,
                dry_run=False,
                progress=False,
            )
            log.info(
                "retention.done",
                erased=report.erased,
                archived_messages=report.archived_messages,
                archive=str(report.archive) if report.archive else None,
            )
        except (ConvlogError, OSError) as e:  # driver errors arrive converted
            log.warning("retention.failed", error=str(e), next_run_s=interval_s)
