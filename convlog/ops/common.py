"""What the long-running operator commands (rebuild, verify) share: connections, Ctrl-C, progress."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from tqdm import tqdm

from convlog.local.embedded_pg import database_url
from convlog.settings import Settings
from convlog.wiring import open_event_log
from events.log import EventLog
from projectors.migrate import migrate
from projectors.pg import PgPool, open_pool

INTERRUPTED = 130


def say(text: str) -> None:
    """What an operator command reports, on stdout (progress bars and errors go to stderr)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


@asynccontextmanager
async def ops_resources(
    settings: Settings, *, name: str, migrated: bool = False, read_only: bool = False
) -> AsyncIterator[tuple[PgPool, EventLog]]:
    """A pool on the migrated database and the event log.

    With Kafka the log's reader is a group-less consumer with plain assignment that never
    commits: it cannot take partitions from, or move offsets of, the live projector's group.
    The embedded log has one writer: ``read_only`` opens it beside ``convlog serve``.
    """
    url = await asyncio.to_thread(database_url, settings)
    if not migrated:
        await migrate(url, legacy_window=settings.legacy_window_policy())
    pool = await open_pool(url, max_size=4, name=name)
    try:
        event_log = await open_event_log(settings, read_only=read_only)
        try:
            yield pool, event_log
        finally:
            await event_log.close()
    finally:
        await pool.close()


def run_interruptibly(main: Callable[[asyncio.Event], Awaitable[int]]) -> int:
    """Run ``main(stop)``; the first Ctrl-C (or SIGTERM) sets ``stop`` so that the batch in flight
    commits and ``main`` returns cleanly; a second Ctrl-C cancels at once (the open transaction
    rolls back, so nothing half-written remains either)."""

    async def run() -> int:
        stop = asyncio.Event()
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()

        def interrupt() -> None:
            if stop.is_set() and task is not None:
                task.cancel()
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, interrupt)
        try:
            return await main(stop)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    try:
        return asyncio.run(run())
    except asyncio.CancelledError:
        sys.stderr.write("convlog: interrupted\n")
        return INTERRUPTED


def progress_bar(total: int, desc: str, unit: str = "ev") -> tqdm[Any]:
    """A bar on stderr with rate and ETA (tqdm's default format)."""
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, file=sys.stderr, mininterval=0.5, smoothing=0.1)


@asynccontextmanager
async def following(bar: tqdm[Any], done: Callable[[], Awaitable[int]], interval_s: float = 0.5) -> AsyncIterator[None]:
    """Move ``bar`` to ``await done()`` every ``interval_s`` while the body runs (and once at the end)."""

    async def refresh() -> None:
        n = min(await done(), bar.total or 0)
        if n > bar.n:
            bar.update(n - bar.n)

    async def tick() -> None:
        while True:
            await asyncio.sleep(interval_s)
            await refresh()

    task = asyncio.create_task(tick())
    try:
        yield
        await refresh()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        bar.close()
