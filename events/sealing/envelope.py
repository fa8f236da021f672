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
    "AeadCache",
    "key_associated_data",
    "open_bytes",
    "open_with",
    "record_associated_data",
    "row_associated_data",
    "seal_bytes",
    "seal_with",
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


class AeadCache:
    """One ``AESGCM`` per data key id, made once: making one (its key schedule) costs about
    1 µs, more than sealing or opening a message with it (about 0.6 µs). Bounded: the least
    recently used goes first. An entry serves only the secret it was made with (a caller always
    presents the key it got from its key ring, which answers a destroyed key without a
    secret), and :meth:`forget` drops a key the ring reports destroyed, so that its schedule
    does not stay in memory until it ages out."""

    __slots__ = ("_aeads", "_size")

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._aeads: dict[str, tuple[bytes, AESGCM]] = {}

    def get(self, key_id: str, secret: bytes) -> AESGCM:
        aeads = self._aeads
        found = aeads.pop(key_id, None)
        if found is None or found[0] != secret:
            if len(secret) != KEY_BYTES:
                raise ValueError(f"a data key is {KEY_BYTES} bytes, got {len(secret)}")
            found = (secret, AESGCM(secret))
            if len(aeads) >= self._size:
                del aeads[next(iter(aeads))]
        aeads[key_id] = found  # the newest last: the first is the least recently used
        return found[1]

    def forget(self, key_id: str) -> None:
        self._aeads.pop(key_id, None)

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._aeads

    def __len__(self) -> int:
        return len(self._aeads)


def seal_bytes(secret: bytes, plaintext: bytes, associated_data: bytes) -> tuple[bytes, bytes]:
    """``(nonce, ciphertext_with_tag)`` under the 32-byte ``secret``."""
    if len(secret) != KEY_BYTES:
        raise ValueError(f"a data key is {KEY_BYTES} bytes, got {len(secret)}")
    return seal_with(AESGCM(secret), plaintext, associated_data)


def seal_with(aead: AESGCM, plaintext: bytes, associated_data: bytes) -> tuple[bytes, bytes]:
    """:func:`seal_bytes` with the key's ``AESGCM`` made already (:class:`AeadCache`)."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce, aead.encrypt(nonce, plaintext, associated_data)


def open_bytes(secret: bytes, nonce: bytes, ciphertext: bytes, associated_data: bytes) -> bytes:
    """The plaintext; :class:`UnauthenticSealError` when it fails authentication,
    :class:`MalformedSealError` when the nonce or ciphertext cannot be one of ours."""
    return open_with(AESGCM(secret), nonce, ciphertext, associated_data)


def open_with(aead: AESGCM, nonce: bytes, ciphertext: bytes, associated_data: bytes) -> bytes:
    """:func:`open_bytes` with the key's ``AESGCM`` made already (:class:`AeadCache`)."""
    if len(nonce) != NONCE_BYTES:
        raise MalformedSealError(f"a nonce is {NONCE_BYTES} bytes, got {len(nonce)}")
    if len(ciphertext) < TAG_BYTES:
        raise MalformedSealError(f"a ciphertext holds at least its {TAG_BYTES}-byte tag, got {len(ciphertext)} bytes")
    try:
        return aead.decrypt(nonce, ciphertext, associated_data)
    except InvalidTag as e:
        raise UnauthenticSealError(
            "the ciphertext fails authentication: altered, or moved from another conversation, event or key"
        ) from e
