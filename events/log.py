"""The event log port.

A log is a fixed set of partitions, each an append-only sequence of records addressed by
offset. Two backends implement it: :mod:`events.kafka_log` (aiokafka) and
:mod:`events.embedded_log` (one local file). ``tests/contract`` runs one suite against both.

Offsets only ever grow within a partition; they need not be dense (Kafka may leave gaps), so
a reader's next position is always ``last_offset + 1``, never a count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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

    async def read(
        self, positions: Mapping[int, int], *, max_records: int = 1000, timeout_s: float = 1.0
    ) -> Sequence[LogRecord]:
        """Up to ``max_records`` records at or after ``positions`` (partition -> next offset).

        Records of one partition come in offset order. Returns an empty sequence when nothing
        arrives within ``timeout_s``.
        """
        ...

    async def end_offsets(self) -> dict[int, int]:
        """Per partition, the offset the next appended record will get (the high watermark)."""
        ...

    async def close(self) -> None: ...
