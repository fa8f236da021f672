"""The key hierarchy's values: subjects, data keys and what the key store tells about them.

Three levels (docs/erasure.md, Keys):

* the **key-encryption key** (KEK): the local master key or a KMS key (:class:`~events.sealing.ports.KeyWrapper`);
* a **user key** per (tenant, user), wrapped by the KEK;
* a **conversation key** per conversation, wrapped by its user's key: it seals the content.

Erasing a conversation destroys its conversation key(s); erasing a user destroys the user
key(s), and with them every conversation key of the user at once — one a concurrent writer
created a moment earlier included, since it is wrapped by the user key. A subject may hold
more than one key (two instances that created a conversation's key at the same time each keep
theirs: records name the key id they are sealed with, so nothing is lost).
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, Literal, TypeAlias

from events.keys import ConversationKey, check_key_part

__all__ = [
    "CONVERSATION_KEY_PREFIX",
    "KEY_BYTES",
    "USER_KEY_PREFIX",
    "DataKey",
    "DestroyedKey",
    "Destruction",
    "KeyInfo",
    "KeyKind",
    "UserSubject",
    "new_key_id",
    "new_secret",
]

KeyKind: TypeAlias = Literal["user", "conversation"]
KEY_BYTES: Final = 32  # AES-256
USER_KEY_PREFIX: Final = "uk_"
CONVERSATION_KEY_PREFIX: Final = "ck_"


@dataclass(frozen=True, slots=True)
class UserSubject:
    """A user of a tenant: what ``DELETE /v1/users/{user_id}`` erases."""

    tenant_id: str
    user_id: str

    def __post_init__(self) -> None:
        check_key_part("tenant_id", self.tenant_id)
        check_key_part("user_id", self.user_id)

    @classmethod
    def of(cls, conversation: ConversationKey) -> UserSubject:
        return cls(conversation.tenant_id, conversation.user_id)


@dataclass(frozen=True, slots=True)
class DataKey:
    """A live key: ``secret`` is the raw 32 bytes (never logged, never in a repr)."""

    key_id: str
    kind: KeyKind
    user: UserSubject
    conversation: ConversationKey | None  # None for a user key
    secret: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class DestroyedKey:
    """What is left of a key erasure destroyed: who it was for, when, who asked. No bytes."""

    key_id: str
    kind: KeyKind
    user: UserSubject
    conversation: ConversationKey | None
    destroyed_at: datetime
    requested_by: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """A key as ``convlog keys list|show`` shows it: never its bytes."""

    key_id: str
    kind: KeyKind
    user: UserSubject
    conversation: ConversationKey | None
    created_at: datetime
    wrapped_by: str  # the KEK's id (user keys) or the user key's id (conversation keys)
    destroyed_at: datetime | None = None
    requested_by: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Destruction:
    """What an erase destroyed. ``already``: nothing was left to destroy (erasing twice)."""

    key_ids: tuple[str, ...]
    conversations: tuple[ConversationKey, ...]  # the conversations whose keys are gone
    already: bool


def new_key_id(kind: KeyKind) -> str:
    """``uk_`` or ``ck_`` then 32 hex digits: random, so two writers never collide."""
    return (USER_KEY_PREFIX if kind == "user" else CONVERSATION_KEY_PREFIX) + uuid.uuid4().hex


def new_secret() -> bytes:
    return secrets.token_bytes(KEY_BYTES)
