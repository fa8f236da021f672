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

import functools
import hashlib
import hmac
import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from events.errors import MalformedSealError, UnauthenticSealError, UnknownKeyError
from events.sealing.envelope import NONCE_BYTES, TAG_BYTES, open_bytes, row_associated_data
from events.sealing.keys import KEY_BYTES, DataKey, DestroyedKey
from events.sealing.ports import KeyRing

__all__ = [
    "CONVERSATION_ROW",
    "EMPTY_WHEN_SEALED",
    "SEALED_COLUMNS",
    "Opened",
    "RowSealer",
    "open_row_bytes",
    "row_ad",
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


@functools.lru_cache(maxsize=4096)
def _row_prefix(conversation_key: str, table: str) -> bytes:
    """The associated data of a row up to its event id: the envelope's, with the last two parts
    empty, less its last separator (a row's is its parts joined by NUL: envelope.py)."""
    return row_associated_data(conversation_key, table, "", "")[:-1]


def row_ad(conversation_key: str, table: str, event_id: str, key_id: str) -> bytes:
    """:func:`~events.sealing.envelope.row_associated_data`, its conversation's and table's
    part made once: building the whole of it was a fifth of opening a message."""
    return b"".join((_row_prefix(conversation_key, table), event_id.encode(), b"\x00", key_id.encode()))


def _nonce_key(secret: bytes) -> bytes:
    return hmac.new(secret, _NONCE_KEY_LABEL, hashlib.sha256).digest()


def _nonce(nonce_key: bytes, plaintext: bytes, associated_data: bytes) -> bytes:
    mac = hmac.new(nonce_key, len(associated_data).to_bytes(8, "big"), hashlib.sha256)
    mac.update(associated_data)
    mac.update(plaintext)
    return mac.digest()[:NONCE_BYTES]


def seal_row_bytes(secret: bytes, plaintext: bytes, associated_data: bytes) -> bytes:
    """``nonce || ciphertext_with_tag`` under the 32-byte ``secret``, the nonce synthetic (the
    module says why): the same inputs give the same bytes."""
    if len(secret) != KEY_BYTES:
        raise ValueError(f"a data key is {KEY_BYTES} bytes, got {len(secret)}")
    return _Cipher(secret).seal(plaintext, associated_data)


def open_row_bytes(secret: bytes, sealed: bytes, associated_data: bytes) -> bytes:
    """The plaintext of :func:`seal_row_bytes`' output; ``UnauthenticSealError`` when it fails
    authentication (altered, or moved to another row), ``MalformedSealError`` when too short."""
    return open_bytes(secret, sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], associated_data)


@dataclass(frozen=True, slots=True)
class Opened:
    """A sealed row's content columns (their stored text; a NULL one absent), or ``erased_at``
    when its key is destroyed (``values`` then empty: the row reads as erased from then on)."""

    values: Mapping[str, str | None]
    erased_at: datetime | None = None


class _Cipher:
    """One data key's AES-GCM and nonce key, made once: making them costs more than opening a
    message (about 2.7 µs, and the first use of a new context more again)."""

    __slots__ = ("_aead", "_nonce_key", "secret")

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self._aead = AESGCM(secret)
        self._nonce_key = _nonce_key(secret)

    def seal(self, plaintext: bytes, associated_data: bytes) -> bytes:
        nonce = _nonce(self._nonce_key, plaintext, associated_data)
        return nonce + self._aead.encrypt(nonce, plaintext, associated_data)

    def open(self, sealed: bytes, associated_data: bytes) -> bytes:
        if len(sealed) < NONCE_BYTES + TAG_BYTES:
            raise MalformedSealError(f"a sealed row holds at least a nonce and a tag, got {len(sealed)} bytes")
        try:
            return self._aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], associated_data)
        except InvalidTag as e:
            raise UnauthenticSealError(
                "a sealed row fails authentication: altered, or moved from another conversation, table, event or key"
            ) from e


class _OpenedRows:
    """The rows opened last, by their exact sealed bytes (and the key, table, conversation and
    event they are bound to), bounded by the bytes they hold: a context read again — the next
    turn's — opens only its new rows (a row opened costs 2 to 3 µs; a hit, a dict look-up).
    A key the ring reports destroyed has its rows dropped at once; nothing is served from here
    without the ring's word that the key is live."""

    __slots__ = ("_bytes", "_limit", "_rows")

    def __init__(self, limit_bytes: int) -> None:
        self._rows: OrderedDict[tuple[str, str, str, str, bytes], Opened] = OrderedDict()
        self._bytes, self._limit = 0, limit_bytes

    def get(self, slot: tuple[str, str, str, str, bytes]) -> Opened | None:
        opened = self._rows.get(slot)
        if opened is not None:
            self._rows.move_to_end(slot)
        return opened

    def put(self, slot: tuple[str, str, str, str, bytes], opened: Opened) -> None:
        size = 2 * len(slot[4])  # the seal and, about as large, its opened columns
        if size > self._limit:
            return
        self._rows[slot] = opened
        self._bytes += size
        while self._bytes > self._limit:
            old, _ = self._rows.popitem(last=False)
            self._bytes -= 2 * len(old[4])

    def forget(self, key_id: str) -> None:
        for slot in [s for s in self._rows if s[0] == key_id]:
            del self._rows[slot]
            self._bytes -= 2 * len(slot[4])


OPENED_ROWS_BYTES = 32 * 1024 * 1024  # per reader: a few hundred contexts of 100 messages


class RowSealer:
    """Seals and opens rows with the keys a :class:`KeyRing` knows (asked on every row: a key
    destroyed meanwhile is destroyed for the next row read)."""

    def __init__(self, keys: KeyRing, *, opened_rows_bytes: int = OPENED_ROWS_BYTES) -> None:
        self._keys = keys
        self._ciphers: dict[str, _Cipher] = {}
        self._opened = _OpenedRows(opened_rows_bytes)

    def _key(self, key_id: str) -> DataKey | DestroyedKey:
        key = self._keys.lookup(key_id)
        if key is None:
            raise UnknownKeyError(f"a read-model row is sealed under key {key_id!r}, which this process does not know")
        if isinstance(key, DestroyedKey) and self._ciphers.pop(key_id, None) is not None:
            self._opened.forget(key_id)  # destroyed: neither its cipher nor its rows are kept for later
        return key

    def _cipher(self, key: DataKey) -> _Cipher:
        cipher = self._ciphers.get(key.key_id)
        if cipher is None or cipher.secret != key.secret:
            if cipher is not None:  # another secret under the id: what the old one opened is not served
                self._opened.forget(key.key_id)
            cipher = self._ciphers[key.key_id] = _Cipher(key.secret)
        return cipher

    def seal(
        self, table: str, conversation_key: str, event_id: str, key_id: str, values: Mapping[str, str | None]
    ) -> bytes | None:
        """The ``sealed`` value of a row whose content columns hold ``values`` (their SQL text;
        NULLs left out); None when the key is destroyed (nothing of the content is stored)."""
        key = self._key(key_id)
        if isinstance(key, DestroyedKey):
            return None
        plaintext = orjson.dumps({c: v for c, v in values.items() if v is not None})
        return self._cipher(key).seal(plaintext, row_ad(conversation_key, table, event_id, key_id))

    def open(self, table: str, conversation_key: str, event_id: str, key_id: str, sealed: bytes | None) -> Opened:
        """The content columns of a sealed row (read them with ``values.get``: a NULL one is
        absent). ``sealed`` None: the row was written or cleared without content."""
        key = self._key(key_id)
        if isinstance(key, DestroyedKey):
            return Opened({}, erased_at=key.destroyed_at)
        if sealed is None:
            return Opened({})
        slot = (key_id, table, conversation_key, event_id, sealed)
        cipher = self._cipher(key)
        opened = self._opened.get(slot)
        if opened is not None:
            return opened
        ad = row_ad(conversation_key, table, event_id, key_id)
        packed = orjson.loads(cipher.open(sealed, ad))
        if not isinstance(packed, dict):
            raise MalformedSealError(f"a sealed {table} row of {conversation_key} holds no column object")
        opened = Opened(packed)
        self._opened.put(slot, opened)
        return opened


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
