"""Appends refused while the read models are ahead of the log.

When records the read models already applied are missing from the log (a file cut after a kill,
an older copy restored, an unclean Kafka leader election), the next append would take a lost
record's offset: the projector never applies it (its position is past it), and read-your-writes
for that offset would answer from read models that hold a different record. So ``serve`` compares
the live version's positions with the log's end at start; if any partition's position lies past
the end, every append answers 503 ``log_behind_read_models`` and a read-your-writes request on such
a partition does too, until an operator restores the log or rebuilds the read models from it
(``convlog rebuild read_models --new --switch``) and restarts the service.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence

import structlog

from events.errors import LogBehindReadModelsError
from events.log import Coordinates, EventLog, ReadBatch
from query_api.ports import ReadModels

log = structlog.get_logger(__name__)


class LogGuard:
    """Which partitions' read models are ahead of the log (partition -> (log end, position))."""

    def __init__(self, behind: Mapping[int, tuple[int, int]]) -> None:
        self.behind = dict(behind)

    @classmethod
    async def measure(cls, event_log: EventLog, reads: Callable[[], Awaitable[ReadModels]]) -> LogGuard:
        # Positions first, the log's end after: other projectors (a Kafka group) may move positions
        # meanwhile, but never past the end of a healthy log at any later moment.
        models = await reads()
        positions = {p: await models.projection_position(p) for p in range(event_log.partition_count)}
        ends = await event_log.end_offsets()
        behind = {p: (ends.get(p, 0), position) for p, position in positions.items() if position > ends.get(p, 0)}
        guard = cls(behind)
        if behind:
            log.error("serve.log_behind_read_models", partitions=guard.detail(), hint=_TO_DO)
        return guard

    def detail(self, partitions: Sequence[int] | None = None) -> str:
        chosen = sorted(self.behind) if partitions is None else partitions
        return ", ".join(
            f"partition {p}: log ends at {self.behind[p][0]}, read models at {self.behind[p][1]}" for p in chosen
        )

    def check_appends(self) -> None:
        if self.behind:
            raise LogBehindReadModelsError(
                f"appends are refused: the event log ends before records the read models already applied "
                f"({self.detail()}). {_TO_DO}"
            )

    def check_read(self, partition: int) -> None:
        """Read-your-writes on ``partition``: its positions do not come from this log."""
        if partition in self.behind:
            raise LogBehindReadModelsError(
                f"the read models of this conversation's partition are ahead of the event log "
                f"({self.detail([partition])}): they cannot confirm an offset of this log. {_TO_DO}"
            )

    def appending(self, event_log: EventLog) -> EventLog:
        """``event_log`` for writers: itself, or a wrapper that refuses appends while behind."""
        return _GuardedLog(event_log, self) if self.behind else event_log


_TO_DO = (
    "An operator must restore the log from a backup, or rebuild the read models from it "
    "(`convlog rebuild read_models --new --switch`), then restart convlog serve."
)


class _GuardedLog:
    """Reads pass through; appends raise :class:`LogBehindReadModelsError`."""

    def __init__(self, inner: EventLog, guard: LogGuard) -> None:
        self._inner, self._guard = inner, guard

    @property
    def partition_count(self) -> int:
        return self._inner.partition_count

    async def append(self, *, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]] = ()) -> Coordinates:
        self._guard.check_appends()
        return await self._inner.append(key=key, value=value, headers=headers)

    async def append_many(
        self, *, key: bytes, values: Sequence[tuple[bytes, Sequence[tuple[str, bytes]]]]
    ) -> list[Coordinates]:
        self._guard.check_appends()
        return await self._inner.append_many(key=key, values=values)

    async def read(self, positions: Mapping[int, int], *, max_records: int = 1000, timeout_s: float = 1.0) -> ReadBatch:
        return await self._inner.read(positions, max_records=max_records, timeout_s=timeout_s)

    async def end_offsets(self, partitions: Collection[int] | None = None) -> dict[int, int]:
        return await self._inner.end_offsets(partitions)

    async def close(self) -> None:
        await self._inner.close()
