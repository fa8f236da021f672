"""docs/producers.md's "Sealed records (schema v5)", written from the page alone, for the tests
of foreign producers: seal a plain v5 record's body (with the nonce given: the golden vector's
fixed one) and open a sealed record again, with fastavro and ``cryptography``'s AESGCM — not
with convlog's ``events.sealing.bodies``, so that the page, convlog's reader and the examples
are three independent readings of one contract that the tests hold to each other.

A record is handled as fastavro's value shapes (``return_named_type``: a body is
``(full name, record)``), so opening a sealed record gives back the exact bytes of the plain
record a producer that does not seal would have written.
"""

from __future__ import annotations

import functools
import io
import json
from pathlib import Path
from typing import Any, Final, cast

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from events.codec import HEADER_SIZE, MAGIC
from events.errors import MalformedSealError, UnauthenticSealError
from events.keys import ConversationKey

REPO: Final = Path(__file__).resolve().parents[1]
SCHEMA_VERSION: Final = 5  # the version the page specifies sealing for
SCHEMA_FILE: Final = REPO / "schemas" / f"event.v{SCHEMA_VERSION}.avsc"
NAMESPACE: Final = "convlog.events."
PURPOSE: Final = b"convlog-sealed-v1"
NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16

# The content fields of each sealed body type, as the clear record writes them (the page's list).
# Every other field of the body is a clear field: equal in the clear record and the sealed body.
EMPTY_CONTENT: Final[dict[str, dict[str, Any]]] = {
    "ConversationStarted": {"title": None, "metadata": {}},
    "MessageAppended": {
        "content": None,
        "name": None,
        "tool_calls": [],
        "reasoning_content": None,
        "metadata": {},
        "blocks": [],
    },
    "SummaryRecorded": {"text": ""},
}
SEALED_TYPES: Final = tuple(EMPTY_CONTENT)

Record = dict[str, Any]


@functools.cache
def _schemas() -> tuple[Any, dict[str, Any], bytes]:
    """(the event schema, {short body name: its schema}, the single-object header) of v5."""
    from events.codec import default_codec  # noqa: PLC0415 - the fingerprint only

    raw = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    named: dict[str, Any] = {}
    event = parse_schema(_strip_logical_types(raw), named_schemas=named)
    bodies = {name: parse_schema(named[NAMESPACE + name], named_schemas=dict(named)) for name in SEALED_TYPES}
    codec = default_codec()
    if codec.version != SCHEMA_VERSION:
        raise AssertionError(f"the sealed spec is v5's; the codec writes v{codec.version}")
    return event, bodies, MAGIC + codec.fingerprint


def _strip_logical_types(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip_logical_types(s) for s in schema]
    return schema


def associated_data(conversation_key: str, event_id: str, body_type: str, key_id: str) -> bytes:
    """The page's associated data: its parts' UTF-8, joined by single NUL bytes."""
    return b"\x00".join([PURPOSE, *(p.encode("utf-8") for p in (conversation_key, event_id, body_type, key_id))])


def read_value(value: bytes) -> Record:
    """A v5 single-object record as fastavro's value shapes (the body as ``(name, record)``)."""
    event_schema, _, header = _schemas()
    if value[:HEADER_SIZE] != header:
        raise AssertionError(f"not a v5 single-object record: header {value[:HEADER_SIZE].hex()}")
    stream = io.BytesIO(value[HEADER_SIZE:])
    record = cast(
        "Record",
        schemaless_reader(stream, event_schema, None, return_named_type=True, return_named_type_override=True),
    )
    if stream.read():
        raise AssertionError("trailing bytes after the record")
    return record


def write_value(record: Record) -> bytes:
    event_schema, _, header = _schemas()
    out = io.BytesIO()
    schemaless_writer(out, event_schema, record)
    return header + out.getvalue()


def body_plaintext(body_type: str, body: Record) -> bytes:
    """The Avro binary (schemaless) of the complete body record, its ``sealed`` null."""
    out = io.BytesIO()
    schemaless_writer(out, _schemas()[1][body_type], {**body, "sealed": None})
    return out.getvalue()


def conversation_key(record: Record) -> str:
    return str(ConversationKey(record["tenant_id"], record["user_id"], record["conversation_id"]))


def seal_value(plain: bytes, key_id: str, secret: bytes, nonce: bytes) -> bytes:
    """The sealed record of a plain v5 record (its body sealed with ``nonce``)."""
    record = read_value(plain)
    full_name, body = record["body"]
    body_type = full_name.removeprefix(NAMESPACE)
    ad = associated_data(conversation_key(record), record["event_id"], body_type, key_id)
    ciphertext = AESGCM(secret).encrypt(nonce, body_plaintext(body_type, body), ad)
    clear = {**body, **EMPTY_CONTENT[body_type], "sealed": {"key_id": key_id, "nonce": nonce, "ciphertext": ciphertext}}
    return write_value({**record, "body": (full_name, clear)})


def open_value(value: bytes, secret: bytes) -> bytes:
    """The plain record a sealed record holds; a plain record as it is. Raises
    :class:`UnauthenticSealError` (altered, moved) and :class:`MalformedSealError` (the envelope)."""
    record = read_value(value)
    full_name, clear = record["body"]
    sealed = clear.get("sealed")
    if sealed is None:
        return value
    body_type = full_name.removeprefix(NAMESPACE)
    nonce, ciphertext = sealed["nonce"], sealed["ciphertext"]
    if len(nonce) != NONCE_BYTES or len(ciphertext) < TAG_BYTES:
        raise MalformedSealError(f"nonce of {len(nonce)} bytes, ciphertext of {len(ciphertext)}")
    if any(clear[field] != empty for field, empty in EMPTY_CONTENT[body_type].items()):
        raise MalformedSealError("content beside the seal")
    ad = associated_data(conversation_key(record), record["event_id"], body_type, sealed["key_id"])
    try:
        plaintext = AESGCM(secret).decrypt(nonce, ciphertext, ad)
    except InvalidTag as e:
        raise UnauthenticSealError("the ciphertext fails authentication") from e
    stream = io.BytesIO(plaintext)
    body = cast(
        "Record",
        schemaless_reader(
            stream, _schemas()[1][body_type], None, return_named_type=True, return_named_type_override=True
        ),
    )
    if stream.read() or body["sealed"] is not None:
        raise MalformedSealError("the plaintext is no complete body with sealed null")
    clear_fields = set(body) - set(EMPTY_CONTENT[body_type]) - {"sealed"}
    if any(body[f] != clear[f] for f in clear_fields):
        raise MalformedSealError("the clear fields disagree with the sealed body's")
    return write_value({**record, "body": (full_name, body)})
