"""Wake-ups for readers waiting on the projection: the projector says which positions it just
committed, and a read-your-writes request waiting for an offset wakes at once instead of
polling Postgres.

Pure asyncio, one event loop. The positions here are a hint, never the answer: a waiter that
wakes still confirms the position from the read models (a switch to another version, or a
notification lost with a listener connection, must not confirm an offset the live version has
not applied), and waits at most ``fallback_s`` for a wake-up before looking again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping

__all__ = [
    "FALLBACK_S",
    "POLL_S",
    "PositionsWatch",
    "next_look",
    "parse_positions",
    "positions_channel",
    "positions_payload",
    "read_until_passed",
]


POLL_S = 0.02  # between looks at the projection position when nothing tells every commit
FALLBACK_S = 0.1  # when a listener does: the longest a wake-up it missed (a version switch) delays the answer


class PositionsWatch:
    """The newest committed next-offset per partition, and an event set on every commit."""

    def __init__(self) -> None:
        self._positions: dict[int, int] = {}
        self._committed = asyncio.Event()
        self.commits = 0  # commits heard so far: a reader notes it before it reads the read models
        self.met = 0  # waits answered True (so a test sees the signal was used, not polling)
        # A listener hears every projector's commits (Postgres NOTIFY): waits may rely on the
        # wake-ups. Without one only this process's projector tells its own; waits look again often.
        self.listening = False

    def committed(self, positions: Mapping[int, int]) -> None:
        """A batch committed: ``positions`` are the partitions' new next offsets."""
        moved = False
        for p, o in positions.items():
            if o != self._positions.get(p):
                self._positions[p], moved = o, True
        if moved:
            self.commits += 1
            # Every waiter wakes and checks its own partition: a few waiters per process, and a
            # fresh event per commit means none misses one between its check and its wait.
            self._committed.set()
            self._committed = asyncio.Event()

    def behind(self, partition: int, offset: int) -> bool:
        """Whether the last commit of ``partition`` that a listening watch heard has not passed
        ``offset``: then the read models, which it hears every commit of, have not either —
        unless it missed one (a version switch): that costs one fallback interval, no answer."""
        position = self._positions.get(partition)
        return self.listening and position is not None and position <= offset

    def forget(self) -> None:
        """Drop what was heard: a listener that (re)starts listening may have missed commits."""
        self._positions.clear()

    def passed(self, partition: int, offset: int) -> bool:
        """Whether a commit this process heard of moved ``partition`` past ``offset``."""
        return self._positions.get(partition, 0) > offset

    async def wait_past(self, partition: int, offset: int, timeout_s: float) -> bool:
        """Until a commit moves ``partition`` past ``offset`` (True), or ``timeout_s`` (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self.passed(partition, offset):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._committed.wait(), remaining)
        self.met += 1
        return True


async def next_look(
    watch: PositionsWatch | None, partition: int, offset: int, remaining_s: float, *, seen: int
) -> None:
    """Until it is worth reading the projection position again, for a reader waiting until it
    passes ``offset`` whose last read did not show that: the commit that passes it, or the
    fallback interval. ``seen``: ``watch.commits`` noted before that read. A commit heard since
    may be the one the read just missed (it committed while the read was under way): no wait at
    all. ``POLL_S`` without a watch, or when the watch said passed already before the read and
    the read models still did not (another version's commit: a wake-up would return at once,
    and the wait would spin)."""
    if watch is not None and watch.commits != seen and watch.passed(partition, offset):
        return
    if watch is None or watch.passed(partition, offset):
        await asyncio.sleep(min(POLL_S, remaining_s))
    else:
        await watch.wait_past(partition, offset, min(FALLBACK_S if watch.listening else POLL_S, remaining_s))


async def read_until_passed(
    read_position: Callable[[], Awaitable[int]],
    watch: PositionsWatch | None,
    partition: int,
    offset: int,
    *,
    deadline: float,
) -> int:
    """Read the projection position of ``partition`` (``read_position``) until it passes
    ``offset`` or the event loop's clock reaches ``deadline``, looking again when
    :func:`next_look` says; the last position read."""
    loop = asyncio.get_running_loop()
    while True:
        # Noted before the read: a commit landing while it is under way must not cost a poll.
        seen = watch.commits if watch is not None else 0
        position = await read_position()
        remaining = deadline - loop.time()
        if position > offset or remaining <= 0:
            return position
        await next_look(watch, partition, offset, remaining, seen=seen)


def positions_channel(schema: str) -> str:
    """The ``LISTEN`` channel of a version's committed positions: its schema's name (a valid
    channel name by construction: both are Postgres identifiers)."""
    return schema


def positions_payload(positions: Mapping[int, int]) -> str:
    """``partition:next_offset`` pairs, comma separated (:func:`parse_positions` reads them)."""
    return ",".join(f"{p}:{o}" for p, o in sorted(positions.items()))


def parse_positions(payload: str) -> dict[int, int]:
    """The positions of a :func:`positions_payload`; ``{}`` for anything else (never raises)."""
    try:
        return {int(p): int(o) for p, _, o in (pair.partition(":") for pair in payload.split(",") if pair)}
    except ValueError:
        return {}
