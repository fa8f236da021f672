"""A key record's JSON (docs/erasure.md, Key records): what the key store writes to its
:class:`~events.sealing.ports.KeyRecordLog` for one key, and reads back.

A live key's record carries its wrapped bytes; a destroyed key's record carries the same ids
and dates, who asked and why, and no bytes at all: the last record per key id wins, so once
the backend drops earlier records (the file at once, the topic at its compaction lag) nothing
of the key's secret is left anywhere.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from events.errors import InvalidKeyError, KeyStoreError
from events.keys import ConversationKey
from events.sealing.keys import DestroyedKey, KeyInfo, KeyKind, UserSubject

__all__ = ["RECORD_VERSION", "StoredKey", "decode_record", "encode_record", "user_subject_text"]

RECORD_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class StoredKey:
    """One key as its latest record tells it. ``wrapped`` is None once destroyed."""

    key_id: str
    kind: KeyKind
    user: UserSubject
    conversation: ConversationKey | None
    created_at: datetime
    wrapped_by: str
    wrapped: bytes | None
    destroyed_at: datetime | None = None
    requested_by: str | None = None
    reason: str | None = None

    @property
    def live(self) -> bool:
        return self.destroyed_at is None

    def info(self) -> KeyInfo:
        return KeyInfo(
            key_id=self.key_id,
            kind=self.kind,
            user=self.user,
            conversation=self.conversation,
            created_at=self.created_at,
            wrapped_by=self.wrapped_by,
            destroyed_at=self.destroyed_at,
            requested_by=self.requested_by,
            reason=self.reason,
        )

    def destroyed(self) -> DestroyedKey:
        assert self.destroyed_at is not None, "a live key has no destruction to tell"
        return DestroyedKey(
            key_id=self.key_id,
            kind=self.kind,
            user=self.user,
            conversation=self.conversation,
            destroyed_at=self.destroyed_at,
            requested_by=self.requested_by,
            reason=self.reason,
        )


def user_subject_text(user: UserSubject) -> str:
    """``tenant:user`` escaped as conversation keys are (events/keys.py): ``\\`` and ``:``
    inside a part take a backslash, so ``a:b`` + ``c`` never reads as ``a`` + ``b:c``."""
    return ":".join(part.replace("\\", "\\\\").replace(":", "\\:") for part in (user.tenant_id, user.user_id))


def subject_text(key: StoredKey) -> str:
    """The subject a key's wrap is bound to (``key_associated_data``)."""
    return str(key.conversation) if key.conversation is not None else user_subject_text(key.user)


def encode_record(key: StoredKey) -> bytes:
    """The record's JSON, compact, keys in a fixed order."""
    value: dict[str, Any] = {
        "version": RECORD_VERSION,
        "key_id": key.key_id,
        "kind": key.kind,
        "tenant_id": key.user.tenant_id,
        "user_id": key.user.user_id,
    }
    if key.conversation is not None:
        value["conversation_id"] = key.conversation.conversation_id
    value |= {"created_at": key.created_at.isoformat(), "wrapped_by": key.wrapped_by}
    if key.destroyed_at is None:
        assert key.wrapped is not None, "a live key's record carries its wrapped bytes"
        value["wrapped"] = base64.b64encode(key.wrapped).decode("ascii")
    else:
        value |= {
            "destroyed_at": key.destroyed_at.isoformat(),
            "requested_by": key.requested_by,
            "reason": key.reason,
        }
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_record(key_id: str, raw: bytes) -> StoredKey:
    """The record stored under ``key_id``; :class:`KeyStoreError` when it is not one of ours
    (a record whose inner key id differs from the id it is stored under included)."""
    try:
        value = json.loads(raw)
        stored = _from_json(value)
    except (ValueError, KeyError, TypeError, binascii.Error, InvalidKeyError) as e:
        raise KeyStoreError(f"key record {key_id!r} is not a key record: {e}") from e
    if stored.key_id != key_id:
        raise KeyStoreError(f"key record stored as {key_id!r} names key {stored.key_id!r}")
    return stored


def _from_json(value: dict[str, Any]) -> StoredKey:
    if value["version"] != RECORD_VERSION:
        raise ValueError(f"version {value['version']!r}, this convlog reads {RECORD_VERSION}")
    kind = value["kind"]
    if kind not in ("user", "conversation"):
        raise ValueError(f"kind {kind!r}")
    user = UserSubject(str(value["tenant_id"]), str(value["user_id"]))
    conversation = (
        ConversationKey(user.tenant_id, user.user_id, str(value["conversation_id"])) if kind == "conversation" else None
    )
    destroyed_at = value.get("destroyed_at")
    wrapped = value.get("wrapped")
    if (destroyed_at is None) == (wrapped is None):
        raise ValueError("a record holds either wrapped bytes (live) or destroyed_at (destroyed)")
    return StoredKey(
        key_id=str(value["key_id"]),
        kind=kind,
        user=user,
        conversation=conversation,
        created_at=datetime.fromisoformat(value["created_at"]),
        wrapped_by=str(value["wrapped_by"]),
        wrapped=base64.b64decode(wrapped, validate=True) if wrapped is not None else None,
        destroyed_at=datetime.fromisoformat(destroyed_at) if destroyed_at is not None else None,
        requested_by=value.get("requested_by"),
        reason=value.get("reason"),
    )
