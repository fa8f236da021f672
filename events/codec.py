"""Avro single-object encoding of :class:`~events.event_types.Event`: ``C3 01``, the 8-byte
little-endian CRC-64-AVRO fingerprint of the writer schema's Parsing Canonical Form, then the
Avro binary body.

A message with ``blocks`` (schema v4) is written with its blocks only — ``content`` null,
``tool_calls`` empty, ``reasoning_content`` null — and read back with ``content`` and
``tool_calls`` derived from the blocks (:func:`events.blocks.chat_view`). The blocks are the
truth: a record that carries both (a foreign producer's) is read from its blocks alone. Its
``reasoning_content`` is kept, though, for validation to refuse: reasoning in two places is
not a view that can be re-derived.

Every ``event.vN.avsc`` in the schema directory is loaded. The highest N writes and reads;
older versions are known writer schemas, resolved to the current one (fastavro). Bodies are
written by fastavro and read by a small strict reader compiled from the writer schema:
fastavro's reader wraps a negative union or enum index around like a Python list index, so a
corrupt record would decode to a different, valid-looking event instead of failing.
"""

from __future__ import annotations

import copy
import functools
import io
import json
import re
import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, cast

from fastavro import parse_schema, schemaless_reader
from fastavro.read import SchemaResolutionError
from fastavro.schema import fingerprint as avro_fingerprint
from fastavro.schema import to_parsing_canonical_form

from events.avro_reader import compile_reader
from events.avro_writer import compile_writer
from events.body_records import FROM_RECORD, Record, body_record
from events.errors import ConfigurationError, CorruptRecordError, InvalidEventError, UnknownSchemaError
from events.event_types import Event, EventBody
from events.event_writer import compile_event_writer, micros
from events.keys import ConversationKey
from events.sealing.bodies import open_event
from events.sealing.ports import KeyRing
from events.slot_builder import slot_builder

MAGIC: Final = b"\xc3\x01"
HEADER_SIZE: Final = 10
_NS: Final = "convlog.events."
_SCHEMA_FILE: Final = re.compile(r"event\.v([1-9][0-9]*)\.avsc")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

# Decoding builds an event per record: without a frozen __init__'s setattr per field (events/slot_builder.py).
_new_event: Final = slot_builder(Event)

# Keys repeat from event to event (a conversation is many events): validate each one once.
_conversation_key: Final = functools.lru_cache(maxsize=4096)(ConversationKey)


# ---- the codec -------------------------------------------------------------------------------


class _Version:
    __slots__ = ("fingerprint", "number", "read", "readers", "schema", "write", "write_event", "writers")

    def __init__(self, number: int, path: Path) -> None:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            # logicalType is not in the canonical form; the converters do the conversions (micros).
            self.schema = cast("Record", parse_schema(_strip_logical_types(raw), named_schemas={}))
            self.fingerprint = bytes.fromhex(avro_fingerprint(to_parsing_canonical_form(raw), "CRC-64-AVRO"))
            self.readers: dict[str, Any] = {}  # every named type's reader: a seal's body record
            self.read = compile_reader(self.schema, self.readers)
            named: dict[str, Any] = {}
            kinds: dict[str, str] = {}
            self.write = compile_writer(self.schema, named, kinds)
            self.write_event = compile_event_writer(self.schema, named, kinds, body_record)
            self.writers = named
        except Exception as e:  # anything wrong with a schema file is a configuration error
            raise ConfigurationError(f"cannot load Avro schema {path}: {e!r}") from e
        self.number = number


def _strip_logical_types(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip_logical_types(s) for s in schema]
    return schema


def _bundled_schema_dir() -> Path:
    here = Path(__file__).resolve().parent
    wheel = here / "_schemas"  # a wheel force-includes schemas/ here
    return wheel if wheel.is_dir() else here.parent / "schemas"


class EventCodec:
    """Encodes events with the newest schema version; decodes records of every known version."""

    def __init__(self, schema_dir: Path | None = None) -> None:
        directory = schema_dir or _bundled_schema_dir()
        found = sorted((int(m[1]), p) for p in directory.glob("event.v*.avsc") if (m := _SCHEMA_FILE.fullmatch(p.name)))
        if not found:
            raise ConfigurationError(f"no event.vN.avsc schema in {directory}")
        versions = [_Version(n, p) for n, p in found]
        self._current = versions[-1]
        self._known = {v.fingerprint: v for v in versions}  # the current version last: it wins ties
        bodies: list[Any] = next((f["type"] for f in self._current.schema.get("fields", ()) if f["name"] == "body"), [])
        unknown = {b["name"] if isinstance(b, dict) else b for b in bodies} ^ set(FROM_RECORD)
        if unknown:
            raise ConfigurationError(f"schema v{self.version} and events.event_types disagree on {sorted(unknown)}")
        self._header = MAGIC + self._current.fingerprint
        self._keys: KeyRing | None = None
        self._content_type = f"application/vnd.apache.avro+binary; encoding=single-object; schema={_NS}Event"

    def with_keys(self, keys: KeyRing) -> EventCodec:
        """This codec (the same compiled schemas), opening the sealed records it decodes with
        ``keys``: :meth:`decode` answers complete bodies, or erased placeholders where a key
        was destroyed (events/sealing/bodies.py)."""
        twin = copy.copy(self)
        twin._keys = keys
        return twin

    def without_keys(self) -> EventCodec:
        """This codec leaving sealed records sealed (their clear fields — ids, roles — read as
        they are, for a scan that opens only the records it picks)."""
        twin = copy.copy(self)
        twin._keys = None
        return twin

    @property
    def keys(self) -> KeyRing | None:
        """What :meth:`decode` opens sealed records with (None: it leaves them sealed)."""
        return self._keys

    @property
    def version(self) -> int:
        """The N of the ``event.vN.avsc`` that writes."""
        return self._current.number

    @property
    def fingerprint(self) -> bytes:
        """CRC-64-AVRO of the writer schema, as it appears in every encoded record (8 bytes)."""
        return self._current.fingerprint

    @property
    def content_type(self) -> str:
        """For a ``content-type`` record header; the payload names its exact schema itself."""
        return self._content_type

    def encode(self, event: Event) -> bytes:
        """Raises :class:`InvalidEventError` when the event does not fit the schema."""
        try:
            out = bytearray(self._header)
            if self._current.write_event is None:
                self._current.write(self.to_record(event), out)
            else:  # the same bytes, without making the record first (events.event_writer)
                self._current.write_event(event, out)
        except InvalidEventError:
            raise
        except (KeyError, ValueError, TypeError, AttributeError, OverflowError) as e:
            raise InvalidEventError(f"does not fit schema v{self.version}: {e!r}", field="event") from e
        return bytes(out)

    def to_record(self, event: Event) -> Record:
        """The event as the Avro record the current schema writes (fastavro's value shapes)."""
        key = event.key
        return {
            "event_id": event.event_id,
            "tenant_id": key.tenant_id,
            "user_id": key.user_id,
            "conversation_id": key.conversation_id,
            "occurred_at": micros(event.occurred_at),
            "producer": event.producer,
            "body": body_record(event.body),
        }

    def encode_body(self, body: EventBody) -> bytes:
        """The body's record alone — no header, no union branch — under the current schema: the
        plaintext of a seal (docs/producers.md, Sealed records). Raises :class:`InvalidEventError`."""
        name, record = body_record(body)
        out = bytearray()
        try:
            self._current.writers[name](record, out)
        except (KeyError, ValueError, TypeError, AttributeError, OverflowError) as e:
            raise InvalidEventError(f"does not fit schema v{self.version}: {e!r}", field="body") from e
        return bytes(out)

    def decode_body(self, data: bytes, body_type: str, *, writer: bytes = b"") -> EventBody:
        """Inverse of :meth:`encode_body`: a seal's plaintext, a ``body_type`` record written
        with the schema of fingerprint ``writer`` (empty: the current one). Its converter reads a
        record of an older schema by its own fields (the newer ones absent read as their
        defaults). Raises :class:`CorruptRecordError` (a seal's plaintext is never resolved
        across an unknown schema: :class:`UnknownSchemaError`)."""
        version = self._known.get(writer) if writer else self._current
        if version is None:
            raise UnknownSchemaError(writer)
        name = _NS + body_type
        read = version.readers.get(name)
        convert = FROM_RECORD.get(name)
        if read is None or convert is None:
            raise CorruptRecordError(f"schema v{version.number} has no body type {body_type!r}")
        try:
            record, end = read(data, 0)
            if end != len(data):
                raise CorruptRecordError(f"{len(data) - end} trailing byte(s) after the sealed {body_type}")
            return convert(record, version.fingerprint)
        except (IndexError, EOFError, struct.error) as e:
            raise CorruptRecordError(f"truncated sealed {body_type}") from e
        except UnicodeDecodeError as e:
            raise CorruptRecordError(f"invalid UTF-8 in a sealed string: {e}") from e
        except (ValueError, KeyError, TypeError) as e:
            raise CorruptRecordError(f"not a valid sealed {body_type}: {e}") from e

    def decode(self, data: bytes | memoryview) -> Event:
        """Raises :class:`UnknownSchemaError`, :class:`CorruptRecordError` or, with keys, a
        :class:`~events.errors.SealedRecordError`; nothing else."""
        event = self.decode_unopened(data)
        return event if self._keys is None else open_event(event, self._keys, self)

    def decode_unopened(self, data: bytes | memoryview) -> Event:
        """The event as the record holds it: a sealed body stays sealed.
        Raises :class:`UnknownSchemaError` or :class:`CorruptRecordError`, nothing else."""
        buf = bytes(data)
        if len(buf) < HEADER_SIZE:
            raise CorruptRecordError(f"{len(buf)}-byte record is shorter than the {HEADER_SIZE}-byte header")
        if buf[:2] != MAGIC:
            raise CorruptRecordError(f"bad magic {buf[:2].hex()}: not an Avro single-object record")
        version = self._known.get(buf[2:HEADER_SIZE])
        if version is None:
            raise UnknownSchemaError(buf[2:HEADER_SIZE])
        try:
            record, end = version.read(buf, HEADER_SIZE)
            if end != len(buf):
                raise CorruptRecordError(f"{len(buf) - end} trailing byte(s) after the record")
            if version is not self._current:  # already validated strictly; now resolve to the reader
                record = schemaless_reader(
                    io.BytesIO(buf[HEADER_SIZE:]),
                    version.schema,
                    self._current.schema,
                    return_named_type=True,
                    return_named_type_override=True,
                )
            name, body = record["body"]
            return _new_event(
                event_id=record["event_id"],
                key=_conversation_key(record["tenant_id"], record["user_id"], record["conversation_id"]),
                occurred_at=_EPOCH + timedelta(0, 0, record["occurred_at"]),  # (days, seconds, microseconds)
                producer=record["producer"],
                body=FROM_RECORD[name](body, version.fingerprint),
            )
        except (IndexError, EOFError, struct.error) as e:
            detail = "" if isinstance(e, IndexError) else f": {e}"
            raise CorruptRecordError(f"truncated record (schema v{version.number}){detail}") from e
        except UnicodeDecodeError as e:
            raise CorruptRecordError(f"invalid UTF-8 in a string: {e}") from e
        except OverflowError as e:
            raise CorruptRecordError(f"occurred_at out of range: {e}") from e
        except (ValueError, KeyError, TypeError, SchemaResolutionError) as e:
            raise CorruptRecordError(f"not a valid event (schema v{version.number}): {e}") from e


@functools.cache
def default_codec() -> EventCodec:
    """The codec over the schemas shipped with this package (built once)."""
    return EventCodec()
