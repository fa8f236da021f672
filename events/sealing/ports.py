"""The sealing ports: what sealing and opening need (:class:`KeyRing`), what erasure and the
producers need (:class:`KeyStore`), and the two seams below the one key store
(:class:`KeyRecordLog`: where key records live; :class:`KeyWrapper`: the key-encryption key,
local or a KMS). One contract suite per port runs against every implementation
(tests/sealing/).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from events.keys import ConversationKey
from events.sealing.keys import DataKey, DestroyedKey, Destruction, KeyInfo, UserSubject

__all__ = ["KeyRecord", "KeyRecordLog", "KeyRing", "KeyStore", "KeyWrapper"]


class KeyRing(Protocol):
    """What this process knows of keys now, synchronously: what opening a record asks."""

    def lookup(self, key_id: str) -> DataKey | DestroyedKey | None:
        """The conversation key ``key_id`` (unwrapped), what is left of it if destroyed, or
        None when this process does not know it (yet: :meth:`refresh`)."""
        ...

    async def refresh(self) -> None:
        """Catch up with the backend: keys other processes created or destroyed since."""
        ...


class KeyStore(KeyRing, Protocol):
    """The key store: creates, hands out and destroys data keys. Keys are primary data: they
    live beside the log (a compacted topic, a file), never only in Postgres."""

    async def ensure(self, conversation: ConversationKey) -> DataKey:
        """The key new events of ``conversation`` are sealed with, created (with its user key,
        if the user has none) when it has none. Raises ``KeyStoreUnavailableError``."""
        ...

    def current(self, conversation: ConversationKey) -> DataKey | None:
        """What :meth:`ensure` would answer, if this process knows it already (no I/O)."""
        ...

    async def destroy_conversation(
        self, conversation: ConversationKey, *, requested_by: str | None = None, reason: str | None = None
    ) -> Destruction: ...

    async def destroy_user(
        self, user: UserSubject, *, requested_by: str | None = None, reason: str | None = None
    ) -> Destruction:
        """Destroy the user's keys: every conversation key of the user is unreadable at once."""
        ...

    def conversations_of(self, user: UserSubject) -> Sequence[ConversationKey]:
        """The conversations that have (or had) a key of this user."""
        ...

    def infos(self) -> Sequence[KeyInfo]:
        """Every key, live or destroyed, without bytes (``convlog keys list``)."""
        ...

    async def rotate(self, wrapper: KeyWrapper) -> int:
        """Rewrap every live user key under ``wrapper`` (the new KEK); the log is not touched.
        Returns how many were rewrapped."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One key's latest record: ``value`` is its JSON (docs/erasure.md, Key records)."""

    key_id: str
    value: bytes


class KeyRecordLog(Protocol):
    """Where key records live: last record per key id wins, and a key's previous records are
    physically gone within a bounded time (the file: at once; the topic: its compaction lag)."""

    async def load(self) -> Iterable[KeyRecord]:
        """Every key's latest record, catching up with every writer so far."""
        ...

    async def put(self, records: Sequence[KeyRecord]) -> None:
        """Write ``records`` durably (acks=all, fsync) before returning: a key is stored before
        anything is sealed with it. Raises ``KeyStoreUnavailableError``."""
        ...

    async def close(self) -> None: ...


class KeyWrapper(Protocol):
    """The key-encryption key: wraps user keys. The local master key, or a KMS (Vault transit,
    AWS KMS, GCP KMS) behind the same three members."""

    @property
    def kek_id(self) -> str:
        """The id of the key new wraps use (recorded beside each wrapped key)."""
        ...

    async def wrap(self, secret: bytes, *, associated_data: bytes) -> bytes: ...

    async def unwrap(self, wrapped: bytes, *, kek_id: str, associated_data: bytes) -> bytes:
        """Raises ``KeyStoreError`` for a KEK it does not hold or a wrap that fails authentication."""
        ...
