"""The in-process :class:`~events.sealing.ports.KeyRecordLog`: for tests and the in-memory
client. Several key stores may share one (as several processes share a topic or a file); a
key's earlier records are gone at once, as in the file."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from events.errors import KeyStoreError
from events.sealing.ports import KeyRecord

__all__ = ["MemoryKeyRecordLog"]


class MemoryKeyRecordLog:
    """Every key's latest record, in a dict. :meth:`close` closes this handle only: a store
    closing does not take the records from another one sharing them (see :meth:`handle`)."""

    def __init__(self, records: dict[str, bytes] | None = None) -> None:
        self._latest: dict[str, bytes] = {} if records is None else records
        self._closed = False

    def handle(self) -> MemoryKeyRecordLog:
        """Another handle on the same records, as a second process would open the same backend."""
        return MemoryKeyRecordLog(self._latest)

    async def load(self) -> Iterable[KeyRecord]:
        self._check_open()
        return [KeyRecord(key_id, value) for key_id, value in self._latest.items()]

    async def put(self, records: Sequence[KeyRecord]) -> None:
        self._check_open()
        for record in records:
            self._latest[record.key_id] = record.value

    async def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise KeyStoreError("the key record log is closed")
