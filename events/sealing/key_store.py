"""The one key store (:class:`SubjectKeyStore`): user keys wrapped by the KEK, conversation
keys wrapped by their user's key, every key's latest record in a :class:`KeyRecordLog`.

Why it is shaped so (docs/erasure.md, Keys):

* :meth:`~SubjectKeyStore.lookup` is what opening a record asks, once per record: a dict hit.
  A conversation key is unwrapped on its first lookup (AES-GCM with the user key, no I/O)
  and kept; user keys are unwrapped by the KEK — which may be a KMS, a network call — when
  records are loaded (:meth:`~SubjectKeyStore.refresh`, :meth:`~SubjectKeyStore.ensure`).
* A conversation key is usable only while the user key that wraps it is: destroying a user
  key makes every conversation key under it unreadable at once, one that another process
  created a moment ago and this one never saw included.
* :meth:`~SubjectKeyStore.ensure` stores a new key durably before answering it: nothing is
  sealed with a key that a crash could lose. Two processes creating a conversation's key at
  once each keep theirs; both stay valid, since a sealed record names its key id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from events.errors import KeyStoreError, SealedRecordError, SubjectNotFoundError
from events.keys import ConversationKey
from events.sealing.envelope import NONCE_BYTES, key_associated_data, open_bytes, seal_bytes
from events.sealing.key_records import StoredKey, decode_record, encode_record, subject_text
from events.sealing.keys import (
    DataKey,
    DestroyedKey,
    Destruction,
    KeyInfo,
    UserSubject,
    new_key_id,
    new_secret,
)
from events.sealing.ports import KeyRecord, KeyRecordLog, KeyWrapper

__all__ = ["SubjectKeyStore"]


class SubjectKeyStore:
    """A :class:`~events.sealing.ports.KeyStore` over ``records`` and ``wrapper``. Create it
    with :meth:`open` (it loads every record)."""

    def __init__(self, records: KeyRecordLog, wrapper: KeyWrapper) -> None:
        self._records = records
        self._wrapper = wrapper
        self._keys: dict[str, StoredKey] = {}  # every key's latest record
        self._user_secrets: dict[str, bytes] = {}  # live user key id -> its secret
        self._opened: dict[str, DataKey] = {}  # conversation key id -> unwrapped, on first lookup
        self._current: dict[ConversationKey, str] = {}  # what ensure answers
        self._user_current: dict[UserSubject, str] = {}  # the user key new conversation keys get
        self._by_user: dict[UserSubject, set[str]] = {}  # every key id of a user
        self._raw: dict[str, bytes] = {}  # each key's record as loaded: a refresh decodes what changed only
        self._lock = asyncio.Lock()  # one create / destroy / rotate at a time in this process

    @classmethod
    async def open(cls, records: KeyRecordLog, wrapper: KeyWrapper) -> SubjectKeyStore:
        store = cls(records, wrapper)
        await store.refresh()
        return store

    # -- the key ring: synchronous, from memory

    def lookup(self, key_id: str) -> DataKey | DestroyedKey | None:
        opened = self._opened.get(key_id)
        return opened if opened is not None else self._open(key_id)

    def current(self, conversation: ConversationKey) -> DataKey | None:
        key_id = self._current.get(conversation)
        found = self.lookup(key_id) if key_id is not None else None
        return found if isinstance(found, DataKey) else None

    def conversations_of(self, user: UserSubject) -> Sequence[ConversationKey]:
        found = {c for k in self._by_user.get(user, ()) if (c := self._keys[k].conversation) is not None}
        return sorted(found, key=str)

    def infos(self) -> Sequence[KeyInfo]:
        return [k.info() for k in sorted(self._keys.values(), key=lambda k: (k.created_at, k.key_id))]

    def _open(self, key_id: str) -> DataKey | DestroyedKey | None:
        key = self._keys.get(key_id)
        if key is None or key.kind != "conversation":
            return None  # unknown here (yet), or a user key: those seal no content
        if not key.live:
            return key.destroyed()
        user_key = self._keys.get(key.wrapped_by)
        if user_key is None:
            return None  # its user key's record is not loaded yet
        if not user_key.live:
            return _destroyed_with(key, user_key)
        secret = _unwrap_conversation_key(key, self._user_secrets[user_key.key_id])
        opened = DataKey(key.key_id, "conversation", key.user, key.conversation, secret)
        self._opened[key_id] = opened
        return opened

    # -- the key store: what changes keys

    async def refresh(self) -> None:
        changed = [r for r in await self._records.load() if self._raw.get(r.key_id) != r.value]
        loaded = [decode_record(r.key_id, r.value) for r in changed]
        for key in loaded:
            if key.kind == "user" and key.live and key.key_id not in self._user_secrets:
                self._user_secrets[key.key_id] = await self._unwrap_user_key(key)
        self._install(loaded)
        self._raw.update((r.key_id, r.value) for r in changed)

    async def ensure(self, conversation: ConversationKey) -> DataKey:
        found = self.current(conversation)
        if found is not None:
            return found
        async with self._lock:
            if (found := self.current(conversation)) is None:
                await self.refresh()  # another process may have created it: one key is better than two
                if (found := self.current(conversation)) is None:
                    found = await self._create(conversation)
            return found

    async def destroy_conversation(
        self, conversation: ConversationKey, *, requested_by: str | None = None, reason: str | None = None
    ) -> Destruction:
        async with self._lock:
            await self.refresh()
            mine = (self._keys[k] for k in self._by_user.get(UserSubject.of(conversation), ()))
            keys = [k for k in mine if k.conversation == conversation]
            if not keys:
                raise SubjectNotFoundError(f"conversation {conversation} never had a key")
            return await self._destroy(keys, (conversation,), requested_by, reason)

    async def destroy_user(
        self, user: UserSubject, *, requested_by: str | None = None, reason: str | None = None
    ) -> Destruction:
        async with self._lock:
            await self.refresh()
            # The user keys first: if the write stops halfway, the conversation keys are already unreadable.
            mine = (self._keys[k] for k in self._by_user.get(user, ()))
            keys = sorted(mine, key=lambda k: k.kind != "user")
            if not keys:
                raise SubjectNotFoundError(f"user {user.user_id!r} of tenant {user.tenant_id!r} never had a key")
            return await self._destroy(keys, tuple(self.conversations_of(user)), requested_by, reason)

    async def rotate(self, wrapper: KeyWrapper) -> int:
        async with self._lock:
            await self.refresh()
            rewrapped = []
            for key in self._keys.values():
                if key.kind == "user" and key.live:
                    secret = self._user_secrets[key.key_id]
                    wrapped = await wrapper.wrap(secret, associated_data=_associated_data(key))
                    rewrapped.append(replace(key, wrapped=wrapped, wrapped_by=wrapper.kek_id))
            await self._put(rewrapped)
            self._wrapper = wrapper
            self._install(rewrapped)
            return len(rewrapped)

    async def close(self) -> None:
        self._user_secrets.clear()
        self._opened.clear()
        await self._records.close()

    # -- inside

    async def _create(self, conversation: ConversationKey) -> DataKey:
        user = UserSubject.of(conversation)
        now = datetime.now(UTC)
        new: list[StoredKey] = []
        user_key_id = self._user_current.get(user)
        if user_key_id is None:
            user_secret = new_secret()
            user_key = StoredKey(new_key_id("user"), "user", user, None, now, self._wrapper.kek_id, b"")
            wrapped = await self._wrapper.wrap(user_secret, associated_data=_associated_data(user_key))
            new.append(replace(user_key, wrapped=wrapped))
            user_key_id = user_key.key_id
        else:
            user_secret = self._user_secrets[user_key_id]
        secret = new_secret()
        key = StoredKey(new_key_id("conversation"), "conversation", user, conversation, now, user_key_id, b"")
        nonce, sealed = seal_bytes(user_secret, secret, _associated_data(key))
        new.append(replace(key, wrapped=nonce + sealed))
        await self._put(new)  # durable before anything is sealed with it
        self._user_secrets[user_key_id] = user_secret
        self._install(new)
        opened = DataKey(key.key_id, "conversation", user, conversation, secret)
        self._opened[key.key_id] = opened
        return opened

    async def _destroy(
        self,
        keys: Sequence[StoredKey],
        conversations: tuple[ConversationKey, ...],
        requested_by: str | None,
        reason: str | None,
    ) -> Destruction:
        readable = [k for k in keys if k.live and (k.kind == "user" or self._user_key_live(k))]
        now = datetime.now(UTC)
        destroyed = [
            replace(k, wrapped=None, destroyed_at=now, requested_by=requested_by, reason=reason) for k in keys if k.live
        ]
        await self._put(destroyed)
        self._install(destroyed)
        return Destruction(
            key_ids=tuple(k.key_id for k in destroyed), conversations=conversations, already=not readable
        )

    def _user_key_live(self, key: StoredKey) -> bool:
        user_key = self._keys.get(key.wrapped_by)
        return user_key is not None and user_key.live

    async def _put(self, keys: Sequence[StoredKey]) -> None:
        if keys:
            records = [KeyRecord(k.key_id, encode_record(k)) for k in keys]
            await self._records.put(records)
            self._raw.update((r.key_id, r.value) for r in records)

    async def _unwrap_user_key(self, key: StoredKey) -> bytes:
        assert key.wrapped is not None
        return await self._wrapper.unwrap(key.wrapped, kek_id=key.wrapped_by, associated_data=_associated_data(key))

    def _install(self, keys: Iterable[StoredKey]) -> None:
        """Take ``keys`` as the latest records, forget the secrets of what they destroy, and
        choose again what :meth:`ensure` answers for the subjects they touch."""
        users: set[UserSubject] = set()
        conversations: set[ConversationKey] = set()
        for key in keys:
            self._keys[key.key_id] = key
            self._by_user.setdefault(key.user, set()).add(key.key_id)
            if key.conversation is not None:
                conversations.add(key.conversation)
            else:
                users.add(key.user)
            if not key.live:
                self._forget(key)
        for user in users:  # a user key changed: every conversation of the user may choose again
            self._user_current.pop(user, None)
            if chosen := _oldest(self._keys[k] for k in self._by_user[user] if k in self._user_secrets):
                self._user_current[user] = chosen
            conversations.update(c for k in self._by_user[user] if (c := self._keys[k].conversation) is not None)
        for conversation in conversations:
            self._current.pop(conversation, None)
            mine = (self._keys[k] for k in self._by_user[UserSubject.of(conversation)])
            usable = (
                k for k in mine if k.conversation == conversation and k.live and k.wrapped_by in self._user_secrets
            )
            if chosen := _oldest(usable):
                self._current[conversation] = chosen

    def _forget(self, key: StoredKey) -> None:
        """Drop a destroyed key's secret, and with a user key those of its conversation keys."""
        self._user_secrets.pop(key.key_id, None)
        self._opened.pop(key.key_id, None)
        if key.kind == "user":
            for key_id in self._by_user[key.user]:
                if self._keys[key_id].wrapped_by == key.key_id:
                    self._opened.pop(key_id, None)


def _oldest(keys: Iterable[StoredKey]) -> str | None:
    """The oldest of ``keys``: every process that has seen the same records chooses the same."""
    best = min(keys, key=lambda k: (k.created_at, k.key_id), default=None)
    return best.key_id if best is not None else None


def _associated_data(key: StoredKey) -> bytes:
    return key_associated_data(key.key_id, subject_text(key))


def _unwrap_conversation_key(key: StoredKey, user_secret: bytes) -> bytes:
    assert key.wrapped is not None
    nonce, sealed = key.wrapped[:NONCE_BYTES], key.wrapped[NONCE_BYTES:]
    try:
        return open_bytes(user_secret, nonce, sealed, _associated_data(key))
    except SealedRecordError as e:
        raise KeyStoreError(
            f"conversation key {key.key_id} does not open under user key {key.wrapped_by}: "
            "its record was altered or moved from another key"
        ) from e


def _destroyed_with(key: StoredKey, user_key: StoredKey) -> DestroyedKey:
    """A conversation key whose own record is live but whose user key is destroyed: it is
    destroyed with it (created by another process while the user was being erased)."""
    assert user_key.destroyed_at is not None
    return DestroyedKey(
        key_id=key.key_id,
        kind=key.kind,
        user=key.user,
        conversation=key.conversation,
        destroyed_at=user_key.destroyed_at,
        requested_by=user_key.requested_by,
        reason=user_key.reason,
    )
