"""The event log port.

A log is a fixed set of partitions, each an append-only sequence of records addressed by
offset. Two backends implement it: :mod:`events.kafka_log` (aiokafka) and
:mod:`events.embedded_log` (one local file). ``tests/contract`` runs one suite against both.

Offsets only ever grow within a partition; they need not be dense, and not every offset holds
a record a reader gets: a transactional Kafka producer leaves a commit or abort marker at an
offset of its own, and a ``read_committed`` reader skips aborted records too. So progress is
measured by the position a read reports (:attr:`ReadBatch.positions`, which moves past such
offsets), never by counting records nor by ``last_offset + 1``: a partition whose last offset is
a marker is read to its end only by the position.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True, slots=True, order=True)
class Coordinates:
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class LogRecord:
    """A stored record, as any consumer sees it."""

    partition: int
    offset: int
    key: bytes
    value: bytes
    timestamp: datetime
    headers: tuple[tuple[str, bytes], ...] = field(default=())

    @property
    def coordinates(self) -> Coordinates:
        return Coordinates(self.partition, self.offset)


@dataclass(frozen=True, slots=True)
class ReadBatch:
    """What one read returns: the records, and per partition read where reading goes on."""

    records: Sequence[LogRecord]
    # Per partition asked for: the next offset to read — past every record returned and every
    # offset that holds none for this reader (transaction markers, aborted records). Equal to
    # the asked position when nothing was read; never behind the last record returned.
    positions: Mapping[int, int]

    @classmethod
    def dense(cls, asked: Mapping[int, int], records: Sequence[LogRecord]) -> ReadBatch:
        """For a log whose every offset holds a record: the next position is the last offset read + 1."""
        positions = dict(asked)
        for r in records:
            positions[r.partition] = r.offset + 1
        return cls(records, positions)


class EventLog(Protocol):
    """What producers, projectors and replays need from the log — and nothing else."""

    @property
    def partition_count(self) -> int: ...

    async def append(self, *, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]] = ()) -> Coordinates:
        """Store one record on the key's partition; resolves once it is durable (acks=all / fsync).

        Raises :class:`~events.errors.LogUnavailableError` (retriable) when the outcome is
        unknown or the log cannot be reached.
        """
        ...

    async def append_many(
        self, *, key: bytes, values: Sequence[tuple[bytes, Sequence[tuple[str, bytes]]]]
    ) -> list[Coordinates]:
        """Store ``values`` — ``(value, headers)`` pairs — as one atomic batch on the key's
        partition: at contiguous offsets, in this order, with no other record between them; all
        of them or none. Resolves once the whole batch is durable, with each record's coordinates
        in order (no values: nothing appended, ``[]``).

        A batch too large for the log to take whole raises :class:`~events.errors.LogError` and
        nothing is appended; :class:`~events.errors.LogUnavailableError` as for :meth:`append`
        (the outcome unknown: then all of the batch was written or none of it).
        """
        ...

    async def read(self, positions: Mapping[int, int], *, max_records: int = 1000, timeout_s: float = 1.0) -> ReadBatch:
        """Up to ``max_records`` records at or after ``positions`` (partition -> next offset),
        and where each of those partitions goes on (:attr:`ReadBatch.positions`).

        Records of one partition come in offset order. Returns no records when nothing arrives
        within ``timeout_s``; it may return sooner with no records but moved positions (it read
        past offsets that hold no record). Readers see committed records only (Kafka:
        ``isolation_level=read_committed``).
        """
        ...

    async def end_offsets(self, partitions: Collection[int] | None = None) -> dict[int, int]:
        """Per partition, the offset the next appended record will get (the high watermark; for
        Kafka's committed reader the last stable offset, which equals it unless a transaction is
        open). A reader is at the end once its position (not its last record + 1) reached it.
        ``partitions`` limits the answer to those (None: every partition): who needs one asks
        for one, so a partition without a leader (a broker died) does not hold up the others."""
        ...

    async def close(self) -> None: ...
