"""The projection side's ports: where records come from, and where they are applied.

A projector keeps its positions in its store, never in the log. When it is given partitions,
its :class:`AssignmentListener` loads their positions and the :class:`RecordSource` seeks
there; when they are taken away, the listener hears it and the source returns no more of their
records. A :class:`ProjectionStore` applies a batch of records exactly once, with the
positions it moves.

Adapters, each in a module of its own: :mod:`projectors.kafka_source` (a Kafka consumer group),
:mod:`projectors.log_source` (any :class:`~events.log.EventLog` read by its single owner),
:mod:`pgstore.store` (Postgres), :mod:`projectors.memory_store` (in memory, for tests).
No driver here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from events.log import LogRecord, ReadBatch
from projectors.errors import PositionBeyondLogEndError, ProjectionError
from projectors.prepare import PreparedBatch

__all__ = [
    "UNREADABLE_BATCH",
    "AssignmentListener",
    "BatchReport",
    "ProjectionStore",
    "RecordSource",
    "UnreadableBatch",
    "check_within_log_end",
    "checked_positions",
]

# The error code of a dead letter for a part of the log that cannot be read at all (a record
# batch the Kafka client cannot decompress or whose checksum fails): no record, no conversation.
UNREADABLE_BATCH = "unreadable_batch"


@dataclass(frozen=True, slots=True)
class UnreadableBatch:
    """Reading ``partition`` stopped at ``offset``: the batch holding it cannot be decoded (where
    it ends is not known before it is). Nothing of the partition from there on is returned."""

    partition: int
    offset: int
    error: str


class AssignmentListener(Protocol):
    async def on_assigned(self, partitions: frozenset[int]) -> Mapping[int, int]:
        """Partitions now owned; returns, for each of them, the next offset to read (from Postgres)."""
        ...

    async def on_revoked(self, partitions: frozenset[int]) -> None:
        """Partitions no longer owned (also on :meth:`RecordSource.stop`); none of their records follow."""
        ...


class RecordSource(Protocol):
    async def start(self, listener: AssignmentListener) -> None: ...

    async def fetch(self, *, max_records: int, timeout_s: float) -> ReadBatch:
        """Up to ``max_records`` records of owned partitions, each partition's in offset order
        (none when nothing arrived within ``timeout_s``), and the owned partitions' next
        positions — past transaction markers and aborted records too, so a position moves even
        when a fetch returns no record."""
        ...

    def seek(self, partition: int, offset: int) -> None:
        """Read ``partition`` from ``offset`` next (after a position conflict, say); ignored
        for a partition not owned."""
        ...

    def take_unreadable(self) -> list[UnreadableBatch]:
        """The batches found unreadable since the last call (their partitions wait at them)."""
        ...

    @property
    def assigned(self) -> frozenset[int]: ...

    async def stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class BatchReport:
    positions: dict[int, int]  # the new next offsets of the batch's partitions
    applied: int
    duplicates: int
    dead_lettered: int
    held: int


class ProjectionStore(Protocol):
    """Applies records to the read models of one projection version, exactly once: a batch's
    rows and the positions it moves are written together, guarded by the expected positions."""

    @property
    def schema(self) -> str:
        """The projection version's name (its Postgres schema)."""
        ...

    async def positions(self, partitions: Sequence[int]) -> dict[int, int]:
        """Stored next offsets; partitions never seen start at 0."""
        ...

    async def prepare(self, records: Sequence[LogRecord]) -> PreparedBatch:
        """The CPU-bound part of applying ``records``, done ahead (no I/O): the runner prepares
        the next batch while the current one's transaction runs."""
        ...

    async def apply(
        self,
        records: Sequence[LogRecord],
        expected: Mapping[int, int],
        *,
        through: Mapping[int, int] | None = None,
        prepared: PreparedBatch | None = None,
    ) -> BatchReport:
        """Apply ``records`` (per partition in offset order, starting at ``expected``; else
        :class:`~projectors.errors.PositionConflictError` and nothing is written); with
        ``through``, those partitions' positions move there too (past what the reader skipped).
        ``prepared``: :meth:`prepare` of exactly ``records``."""
        ...

    async def record_unreadable(self, partition: int, offset: int, error: str) -> None:
        """A dead letter for a part of the log that cannot be read from ``offset`` on."""
        ...


def checked_positions(partitions: frozenset[int], positions: Mapping[int, int]) -> dict[int, int]:
    """The listener's positions of ``partitions``: every source refuses an answer that misses one."""
    missing = partitions - positions.keys()
    if missing:
        raise ProjectionError(f"assignment listener returned no position for partitions {sorted(missing)}")
    return {p: positions[p] for p in partitions}


def check_within_log_end(positions: Mapping[int, int], ends: Mapping[int, int], *, where: str) -> None:
    """Refuse stored positions past the log's end: the store was built from another log."""
    beyond = {p: (o, ends.get(p, 0)) for p, o in positions.items() if o > ends.get(p, 0)}
    if beyond:
        detail = ", ".join(f"partition {p} at {o} but the log ends at {e}" for p, (o, e) in sorted(beyond.items()))
        raise PositionBeyondLogEndError(
            f"stored positions lie past the end of {where} ({detail}): the read models were built from another "
            "topic or the topic was created anew; set CONVLOG_TOPIC to the original topic, or rebuild"
        )
