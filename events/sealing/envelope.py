"""The AEAD envelope: AES-256-GCM with a random 12-byte nonce, the 16-byte tag appended to the
ciphertext (what ``cryptography``'s AESGCM, Java's ``AES/GCM/NoPadding`` and Go's
``cipher.NewGCM`` all produce), and associated data that binds a ciphertext to where it belongs.

Associated data (docs/producers.md, Sealed records) is the UTF-8 of its parts joined by NUL
bytes, the first part naming the purpose. None of the parts can hold a NUL: keys and event ids
refuse control characters, key ids are ``ck_``/``uk_`` and hex, body types are fixed names.

* a sealed log record: ``convlog-sealed-v1``, the conversation key (``tenant:user:conversation``,
  escaped as on the log), the event id, the body type (``MessageAppended``), the key id;
* a read-model row in Postgres: ``convlog-row-v1``, the conversation key, the table, the row's
  event id, the key id;
* a wrapped key: ``convlog-key-v1``, the key id, the subject (``tenant:user`` or the
  conversation key).

Moving a ciphertext to another conversation, event or key fails authentication
(:class:`~events.errors.UnauthenticSealError`), like a flipped bit does.
"""

from __future__ import annotations

import os
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from events.errors import MalformedSealError, UnauthenticSealError
from events.sealing.keys import KEY_BYTES

__all__ = [
    "NONCE_BYTES",
    "TAG_BYTES",
    "key_associated_data",
    "open_bytes",
    "record_associated_data",
    "row_associated_data",
    "seal_bytes",
]

NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16
_SEP: Final = b"\x00"
_RECORD: Final = b"convlog-sealed-v1"
_ROW: Final = b"convlog-row-v1"
_KEY: Final = b"convlog-key-v1"


def _join(purpose: bytes, *parts: str) -> bytes:
    return _SEP.join((purpose, *(p.encode("utf-8") for p in parts)))


def record_associated_data(conversation_key: str, event_id: str, body_type: str, key_id: str) -> bytes:
    """What a sealed log record's ciphertext is bound to (``conversation_key`` as ``str(key)``)."""
    return _join(_RECORD, conversation_key, event_id, body_type, key_id)


def row_associated_data(conversation_key: str, table: str, event_id: str, key_id: str) -> bytes:
    """What a sealed read-model row's ciphertext is bound to."""
    return _join(_ROW, conversation_key, table, event_id, key_id)


def key_associated_data(key_id: str, subject: str) -> bytes:
    """What a wrapped key is bound to: a wrapped key moved to another id or subject fails."""
    return _join(_KEY, key_id, subject)


def seal_bytes(secret: bytes, plaintext: bytes, associated_data: bytes) -> tuple[bytes, bytes]:
    """``(nonce, ciphertext_with_tag)`` under the 32-byte ``secret``."""
    if len(secret) != KEY_BYTES:
        raise ValueError(f"a data key is {KEY_BYTES} bytes, got {len(secret)}")
    nonce = os.urandom(NONCE_BYTES)
    return nonce, AESGCM(secret).encrypt(nonce, plaintext, associated_data)


def open_bytes(secret: bytes, nonce: bytes, ciphertext: bytes, associated_data: bytes) -> bytes:
    """The plaintext; :class:`UnauthenticSealError` when it fails authentication,
    :class:`MalformedSealError` when the nonce or ciphertext cannot be one of ours."""
    if len(nonce) != NONCE_BYTES:
        raise MalformedSealError(f"a nonce is {NONCE_BYTES} bytes, got {len(nonce)}")
    if len(ciphertext) < TAG_BYTES:
        raise MalformedSealError(f"a ciphertext holds at least its {TAG_BYTES}-byte tag, got {len(ciphertext)} bytes")
    try:
        return AESGCM(secret).decrypt(nonce, ciphertext, associated_data)
    except InvalidTag as e:
        raise UnauthenticSealError(
            "the ciphertext fails authentication: altered, or moved from another conversation, event or key"
        ) from e
