"""A dict-backed key ring and key store for the sealing tests that are not about the key store
itself (its contract suite runs the real ones): enough of :class:`~events.sealing.ports.KeyStore`
for the producer to seal and the codec to open."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime

from events.keys import ConversationKey
from events.sealing.keys import DataKey, DestroyedKey, Destruction, KeyInfo, UserSubject, new_key_id, new_secret
from events.sealing.ports import KeyWrapper


class DictKeys:
    """Conversation keys in a dict; ``destroy`` leaves what erasure leaves."""

    def __init__(self) -> None:
        self.keys: dict[str, DataKey | DestroyedKey] = {}
        self._current: dict[ConversationKey, DataKey] = {}

    def lookup(self, key_id: str) -> DataKey | DestroyedKey | None:
        return self.keys.get(key_id)

    async def refresh(self) -> None:
        return None

    def current(self, conversation: ConversationKey) -> DataKey | None:
        return self._current.get(conversation)

    async def ensure(self, conversation: ConversationKey) -> DataKey:
        return self.current(conversation) or self.add(conversation)

    def add(self, conversation: ConversationKey, *, secret: bytes | None = None, key_id: str | None = None) -> DataKey:
        key = DataKey(
            key_id or new_key_id("conversation"),
            "conversation",
            UserSubject.of(conversation),
            conversation,
            secret or new_secret(),
        )
        self.keys[key.key_id] = key
        self._current[conversation] = key
        return key

    def destroy(self, conversation: ConversationKey) -> list[str]:
        gone = []
        for key_id, key in list(self.keys.items()):
            if isinstance(key, DataKey) and key.conversation == conversation:
                self.keys[key_id] = DestroyedKey(key_id, key.kind, key.user, conversation, datetime.now(UTC))
                gone.append(key_id)
        self._current.pop(conversation, None)
        return gone

    async def destroy_conversation(
        self, conversation: ConversationKey, *, requested_by: str | None = None, reason: str | None = None
    ) -> Destruction:
        gone = self.destroy(conversation)
        return Destruction(tuple(gone), (conversation,), already=not gone)

    async def destroy_user(
        self, user: UserSubject, *, requested_by: str | None = None, reason: str | None = None
    ) -> Destruction:
        conversations = self.conversations_of(user)
        gone = [key_id for c in conversations for key_id in self.destroy(c)]
        return Destruction(tuple(gone), tuple(conversations), already=not gone)

    def conversations_of(self, user: UserSubject) -> Sequence[ConversationKey]:
        return sorted({k.conversation for k in self.keys.values() if k.user == user and k.conversation}, key=str)

    def infos(self) -> Sequence[KeyInfo]:
        return []

    async def rotate(self, wrapper: KeyWrapper) -> int:
        return 0

    async def close(self) -> None:
        return None

    def moved(self, key: DataKey, conversation: ConversationKey) -> DataKey:
        """The same secret, claimed for another conversation (what a forged key store would say)."""
        forged = dataclasses.replace(key, conversation=conversation, user=UserSubject.of(conversation))
        self.keys[key.key_id] = forged
        return forged
