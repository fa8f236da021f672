"""What the long-running operator commands (rebuild, verify) share: their reports and progress bars.

What they open is :mod:`convlog.resources`'s, Ctrl-C :mod:`convlog.interruptible`'s."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from tqdm import tqdm


def say(text: str) -> None:
    """What an operator command reports, on stdout (progress bars and errors go to stderr)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


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
