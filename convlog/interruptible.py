"""Ctrl-C for convlog's long-running commands: the processes (``project``, ``summarize``) and the
operator jobs (``rebuild``, ``verify``) stop the same way, so both use this one."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable

__all__ = ["INTERRUPTED", "run_interruptibly"]

INTERRUPTED = 130


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
