"""Read-model rows sealed under their conversation's data key: what Postgres holds of a sealed
conversation's content (issue 25, docs/erasure.md). Pure; no driver.

A row whose source record was sealed (``key_id`` set) is stored with its content columns NULL
and ``sealed`` = ``nonce || AES-256-GCM(content)``: the content columns' values *as they would
be stored* (their SQL text: JSON for the json columns), packed into one compact JSON object, so
that opening gives back exactly the column values the plain row would hold and every reader's
conversion runs unchanged. Which columns are sealed is :data:`SEALED_COLUMNS`; ids, roles,
token counts, offsets, times, finish reasons and model names stay clear (the fold and the
readers compute on them).

The nonce is **synthetic** (SIV-like): the first 12 bytes of HMAC-SHA256 under a key derived
from the data key, over the associated data's length, the associated data and the plaintext.
A rebuild therefore writes byte-identical rows (``convlog verify`` compares rows as text). Why
this is safe for GCM: GCM breaks when one nonce seals two *different* (associated data,
plaintext) pairs under one key. A synthetic nonce repeats for the same pair — and then the
ciphertext is the same, which tells only that the same row of the same event was written with
the same content again (the associated data names the conversation, table, event id and key) —
and for different pairs only by a 96-bit PRF collision (about n²/2⁹⁷ for n rows under one key:
negligible for a conversation). The HMAC key is derived (``HMAC(secret, "convlog-row-nonce-v1")``)
so that the data key itself is never used by two primitives.

A destroyed key (erasure) opens to nothing: the row reads as erased (:class:`RowSealer`), and
writing a row under it stores no content at all. A key this process does not know raises
:class:`~events.errors.UnknownKeyError`: never plaintext, never a guess.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import orjson
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from events.errors import MalformedSealError, UnknownKeyError
from events.sealing.envelope import NONCE_BYTES, open_bytes, row_associated_data
from events.sealing.keys import KEY_BYTES, DataKey, DestroyedKey
from events.sealing.ports import KeyRing

__all__ = [
    "CONVERSATION_ROW",
    "EMPTY_WHEN_SEALED",
    "SEALED_COLUMNS",
    "Opened",
    "RowSealer",
    "open_row_bytes",
    "seal_row_bytes",
    "seal_row_values",
    "sealed_conversation_columns",
]

_NONCE_KEY_LABEL: Final = b"convlog-row-nonce-v1"

# The content columns of each table: what a person or a model wrote. Everything else is clear.
SEALED_COLUMNS: Final[Mapping[str, tuple[str, ...]]] = {
    "transcript": ("content", "name", "tool_calls", "reasoning_content", "metadata", "blocks"),
    "summaries": ("text",),
    "conversations": ("title", "metadata"),
}
# A conversation's row has no event id of its own (it is upserted by every event): its
# associated data names the conversation and the table, and this in the event id's place.
CONVERSATION_ROW: Final = ""
# The content columns that are NOT NULL (a JSON object): a sealed row stores ``{}`` there.
EMPTY_WHEN_SEALED: Final = frozenset({"metadata"})


def _nonce(secret: bytes, plaintext: bytes, associated_data: bytes) -> bytes:
    nonce_key = hmac.new(secret, _NONCE_KEY_LABEL, hashlib.sha256).digest()
    mac = hmac.new(nonce_key, len(associated_data).to_bytes(8, "big"), hashlib.sha256)
    mac.update(associated_data)
    mac.update(plaintext)
    return mac.digest()[:NONCE_BYTES]


def seal_row_bytes(secret: bytes, plaintext: bytes, associated_data: bytes) -> bytes:
    """``nonce || ciphertext_with_tag`` under the 32-byte ``secret``, the nonce synthetic (the
    module says why): the same inputs give the same bytes."""
    if len(secret) != KEY_BYTES:
        raise ValueError(f"a data key is {KEY_BYTES} bytes, got {len(secret)}")
    nonce = _nonce(secret, plaintext, associated_data)
    return nonce + AESGCM(secret).encrypt(nonce, plaintext, associated_data)


def open_row_bytes(secret: bytes, sealed: bytes, associated_data: bytes) -> bytes:
    """The plaintext of :func:`seal_row_bytes`' output; ``UnauthenticSealError`` when it fails
    authentication (altered, or moved to another row), ``MalformedSealError`` when too short."""
    return open_bytes(secret, sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], associated_data)


@dataclass(frozen=True, slots=True)
class Opened:
    """A sealed row's content columns (their stored text), or ``erased_at`` when its key is
    destroyed (``values`` then empty: the row reads as erased, from the key's destruction on)."""

    values: Mapping[str, str | None]
    erased_at: datetime | None = None


class RowSealer:
    """Seals and opens rows with the keys a :class:`KeyRing` knows."""

    def __init__(self, keys: KeyRing) -> None:
        self._keys = keys

    def _key(self, key_id: str) -> DataKey | DestroyedKey:
        key = self._keys.lookup(key_id)
        if key is None:
            raise UnknownKeyError(f"a read-model row is sealed under key {key_id!r}, which this process does not know")
        return key

    def seal(
        self, table: str, conversation_key: str, event_id: str, key_id: str, values: Mapping[str, str | None]
    ) -> bytes | None:
        """The ``sealed`` value of a row whose content columns hold ``values`` (their SQL text;
        NULLs left out); None when the key is destroyed (nothing of the content is stored)."""
        key = self._key(key_id)
        if isinstance(key, DestroyedKey):
            return None
        plaintext = orjson.dumps({c: v for c, v in values.items() if v is not None})
        return seal_row_bytes(key.secret, plaintext, row_associated_data(conversation_key, table, event_id, key_id))

    def open(self, table: str, conversation_key: str, event_id: str, key_id: str, sealed: bytes | None) -> Opened:
        """The content columns of a sealed row (each column of :data:`SEALED_COLUMNS`, None where
        NULL). ``sealed`` None: the row was written or cleared without content."""
        key = self._key(key_id)
        if isinstance(key, DestroyedKey):
            return Opened({}, erased_at=key.destroyed_at)
        if sealed is None:
            return Opened(dict.fromkeys(SEALED_COLUMNS[table]))
        ad = row_associated_data(conversation_key, table, event_id, key_id)
        packed = orjson.loads(open_row_bytes(key.secret, bytes(sealed), ad))
        if not isinstance(packed, dict):
            raise MalformedSealError(f"a sealed {table} row of {conversation_key} holds no column object")
        return Opened({c: packed.get(c) for c in SEALED_COLUMNS[table]})


def seal_row_values(
    sealer: RowSealer | None,
    table: str,
    columns: tuple[str, ...],
    row: tuple[object, ...],
    *,
    conversation_key: str,
    event_id: str,
    key_id: str | None,
) -> tuple[object, ...]:
    """``row`` (the values of ``columns``, ending with ``sealed`` and ``key_id``) as stored: as
    it is for a plain row (``key_id`` None), else with the content columns NULL (``{}`` for a
    NOT NULL JSON object: :data:`EMPTY_WHEN_SEALED`) and their values sealed."""
    if key_id is None:
        return row
    if sealer is None:
        raise UnknownKeyError(f"a {table} row of {conversation_key} is sealed under {key_id!r}, but no key ring is set")
    values = list(row)
    content: dict[str, str | None] = {}
    for c in SEALED_COLUMNS[table]:
        i = columns.index(c)
        value = values[i]
        content[c] = None if value is None else str(value)
        values[i] = "{}" if c in EMPTY_WHEN_SEALED else None
    values[-2] = sealer.seal(table, conversation_key, event_id, key_id, content)
    values[-1] = key_id
    return tuple(values)


def sealed_conversation_columns(
    sealer: RowSealer | None, conversation_key: str, key_id: str | None, title: str | None, metadata: Mapping[str, str]
) -> dict[str, object]:
    """A conversation row's title, metadata, ``sealed`` (bytea's hex text, for a JSON upsert)
    and ``key_id``: as they are without a key id, else title NULL, metadata ``{}`` and both sealed."""
    if key_id is None:
        return {"title": title, "metadata": metadata, "sealed": None, "key_id": None}
    text = json.dumps(metadata, ensure_ascii=False, separators=(",", ":"))
    columns = ("title", "metadata", "sealed", "key_id")
    row = seal_row_values(
        sealer,
        "conversations",
        columns,
        (title, text, None, None),
        conversation_key=conversation_key,
        event_id=CONVERSATION_ROW,
        key_id=key_id,
    )
    sealed = row[2]
    return {
        "title": None,
        "metadata": {},
        "sealed": None if not isinstance(sealed, bytes) else "\\x" + sealed.hex(),
        "key_id": key_id,
    }
