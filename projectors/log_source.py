"""The record source over any :class:`~events.log.EventLog` read by one process that owns every
partition (the embedded log; a rebuild worker owns a share of them)."""

from __future__ import annotations

from collections.abc import Collection

from events.errors import LogClosedError
from events.log import EventLog, ReadBatch
from projectors.ports import AssignmentListener, UnreadableBatch, check_within_log_end, checked_positions


class LogSource:
    """Reads an :class:`~events.log.EventLog` as the single owner of all its partitions (or of
    ``partitions``: a rebuild splits them over worker processes)."""

    def __init__(self, log: EventLog, partitions: Collection[int] | None = None) -> None:
        self._log = log
        self._partitions = None if partitions is None else frozenset(partitions)
        self._listener: AssignmentListener | None = None
        self._next: dict[int, int] = {}

    async def start(self, listener: AssignmentListener) -> None:
        partitions = self._partitions if self._partitions is not None else frozenset(range(self._log.partition_count))
        positions = checked_positions(partitions, await listener.on_assigned(partitions))
        check_within_log_end(positions, await self._log.end_offsets(), where="the log")
        self._next = positions
        self._listener = listener

    async def fetch(self, *, max_records: int, timeout_s: float) -> ReadBatch:
        if self._listener is None:
            raise LogClosedError("the record source is not running")
        batch = await self._log.read(dict(self._next), max_records=max_records, timeout_s=timeout_s)
        for p, o in batch.positions.items():
            if p in self._next:
                self._next[p] = o
        return ReadBatch(batch.records, dict(self._next))

    def seek(self, partition: int, offset: int) -> None:
        if partition in self._next:
            self._next[partition] = offset

    def take_unreadable(self) -> list[UnreadableBatch]:
        return []  # the embedded log has no codecs; a corrupt file is refused when opened

    @property
    def assigned(self) -> frozenset[int]:
        return frozenset(self._next)

    async def stop(self) -> None:
        listener, owned = self._listener, self.assigned
        self._listener, self._next = None, {}
        if listener is not None and owned:
            await listener.on_revoked(owned)
