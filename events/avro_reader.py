"""A strict Avro binary reader, compiled once from a (fastavro-parsed) writer schema.

Why not fastavro's reader: it wraps a negative union or enum index around like a Python list
index, so a corrupt record decodes to a different, valid-looking event instead of failing.
This reader refuses bad indices, truncation, invalid UTF-8, over-long varints and oversized
block counts with :class:`CorruptRecordError`; on valid data it returns exactly what fastavro
returns (``return_named_type=True``), which a test checks. No schema resolution: older writer
versions are resolved by fastavro after this reader has checked them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final, TypeAlias

from events.errors import CorruptRecordError

Reader: TypeAlias = Callable[[bytes, int], tuple[Any, int]]


def _read_long(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    n, shift, pos = b & 0x7F, 7, pos + 1
    while b & 0x80:
        b = buf[pos]
        n |= (b & 0x7F) << shift
        shift, pos = shift + 7, pos + 1
    if n >> 64:
        raise CorruptRecordError("varint does not fit in 64 bits")
    return (n >> 1) ^ -(n & 1), pos


def _read_int(buf: bytes, pos: int) -> tuple[int, int]:
    n, pos = _read_long(buf, pos)
    if not -(1 << 31) <= n < 1 << 31:
        raise CorruptRecordError(f"int {n} does not fit in 32 bits")
    return n, pos


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = _read_long(buf, pos)
    if n < 0:
        raise CorruptRecordError(f"negative length {n}")
    if pos + n > len(buf):
        raise EOFError(f"{n} bytes announced, {len(buf) - pos} left")
    return buf[pos : pos + n], pos + n


def _read_string(buf: bytes, pos: int) -> tuple[str, int]:
    n = buf[pos]
    if n < 0x80 and not n & 1:  # the usual one-byte length
        end = pos + 1 + (n >> 1)
        if end > len(buf):
            raise EOFError(f"{n >> 1} bytes announced, {len(buf) - pos - 1} left")
        return buf[pos + 1 : end].decode(), end
    raw, pos = _read_bytes(buf, pos)
    return raw.decode(), pos


def _read_boolean(buf: bytes, pos: int) -> tuple[bool, int]:
    if buf[pos] > 1:
        raise CorruptRecordError(f"boolean byte {buf[pos]}")
    return buf[pos] == 1, pos + 1


def _struct_reader(fmt: str) -> Reader:
    unpack, size = struct.Struct(fmt).unpack_from, struct.calcsize(fmt)
    return lambda buf, pos: (unpack(buf, pos)[0], pos + size)


def _read_null(_buf: bytes, pos: int) -> tuple[None, int]:
    return None, pos


_PRIMITIVES: Final[dict[str, Reader]] = {
    "null": _read_null,
    "boolean": _read_boolean,
    "int": _read_int,
    "long": _read_long,
    "float": _struct_reader("<f"),
    "double": _struct_reader("<d"),
    "bytes": _read_bytes,
    "string": _read_string,
}


def compile_reader(schema: Any, named: dict[str, Reader]) -> Reader:
    """A reader for one (fastavro-parsed) writer schema; values look like fastavro's with
    ``return_named_type=True, return_named_type_override=True``."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]

        def read_named(buf: bytes, pos: int) -> tuple[Any, int]:  # a recursive reference
            return named[schema](buf, pos)

        return named.get(schema, read_named)
    if isinstance(schema, list):
        return _compile_union(schema, named)
    kind = schema["type"]
    if kind in ("record", "error"):
        fields: list[tuple[str, Reader, int]] = []

        def read_record(buf: bytes, pos: int) -> tuple[dict[str, Any], int]:
            record: dict[str, Any] = {}
            for name, read, empty in fields:
                if empty and buf[pos] == 0:  # null, or no items: the one byte is the value
                    record[name] = None if empty == _NULL else [] if empty == _ARRAY else {}
                    pos += 1
                else:
                    record[name], pos = read(buf, pos)
            return record, pos

        named[schema["name"]] = read_record
        fields.extend((f["name"], compile_reader(f["type"], named), _empty_value(f["type"])) for f in schema["fields"])
        return read_record
    if kind == "enum":
        symbols = tuple(schema["symbols"])

        def read_enum(buf: bytes, pos: int) -> tuple[str, int]:
            i, pos = _read_long(buf, pos)
            if not 0 <= i < len(symbols):
                raise CorruptRecordError(f"enum index {i} out of range for {schema['name']}")
            return symbols[i], pos

        named[schema["name"]] = read_enum
        return read_enum
    if kind == "fixed":
        size: int = schema["size"]

        def read_fixed(buf: bytes, pos: int) -> tuple[bytes, int]:
            if pos + size > len(buf):
                raise EOFError("fixed runs past the end")
            return buf[pos : pos + size], pos + size

        named[schema["name"]] = read_fixed
        return read_fixed
    if kind in ("array", "map"):
        return _compile_blocks(
            compile_reader(schema["items" if kind == "array" else "values"], named), is_map=kind == "map"
        )
    return _PRIMITIVES[kind]


_NULL, _ARRAY, _MAP = 1, 2, 3


def _empty_value(schema: Any) -> int:
    """Whether a field whose first byte is 0 is that byte alone, and what it is then:
    ``["null", ...]`` (union index 0: null), an array or a map with no items; else 0. Most of
    an event's fields are one of these and empty, so the record reader takes them inline,
    without a call (the projector decodes every record)."""
    if isinstance(schema, list) and schema and schema[0] == "null":
        return _NULL
    if isinstance(schema, dict) and schema.get("type") in ("array", "map"):
        return _ARRAY if schema["type"] == "array" else _MAP
    return 0


def _compile_union(branches: list[Any], named: dict[str, Reader]) -> Reader:
    readers = tuple(compile_reader(b, named) for b in branches)
    names = [b.get("name") if isinstance(b, dict) else None if b in _PRIMITIVES else b for b in branches]
    # Like fastavro's return_named_type_override: a union with one named type gives bare values.
    tags = tuple(names) if sum(n is not None for n in names) > 1 else (None,) * len(names)

    def read_union(buf: bytes, pos: int) -> tuple[Any, int]:
        i, pos = _read_long(buf, pos)
        if not 0 <= i < len(readers):
            raise CorruptRecordError(f"union index {i} out of range 0..{len(readers) - 1}")
        value, pos = readers[i](buf, pos)
        tag = tags[i]
        return (value if tag is None else (tag, value)), pos

    if len(branches) != 2 or branches[0] != "null" or tags[1] is not None:
        return read_union
    read_value = readers[1]

    def read_optional(buf: bytes, pos: int) -> tuple[Any, int]:  # the usual ["null", T]
        index = buf[pos]
        if index == 0:
            return None, pos + 1
        return read_value(buf, pos + 1) if index == 2 else read_union(buf, pos)

    return read_optional


def _compile_blocks(read_item: Reader, *, is_map: bool) -> Reader:
    def read_blocks(buf: bytes, pos: int) -> tuple[Any, int]:
        items: Any = {} if is_map else []
        while True:
            count, pos = _read_long(buf, pos)
            if count == 0:
                return items, pos
            if count < 0:  # a block with its byte size
                count, (_, pos) = -count, _read_long(buf, pos)
            if count > len(buf) - pos:  # every item of a convlog schema takes at least one byte
                raise EOFError(f"block of {count} items, {len(buf) - pos} bytes left")
            for _ in range(count):
                if is_map:
                    key, pos = _read_string(buf, pos)
                    items[key], pos = read_item(buf, pos)
                else:
                    item, pos = read_item(buf, pos)
                    items.append(item)

    return read_blocks
