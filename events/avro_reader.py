"""A strict Avro binary reader, compiled once from a (fastavro-parsed) writer schema.

Why not fastavro's reader: it wraps a negative union or enum index around like a Python list
index, so a corrupt record decodes to a different, valid-looking event instead of failing.
This reader refuses bad indices, truncation, invalid UTF-8, over-long varints and oversized
block counts with :class:`CorruptRecordError`; on valid data it returns exactly what fastavro
returns (``return_named_type=True``), which a test checks. No schema resolution: older writer
versions are resolved by fastavro after this reader has checked them. Each record is read by a
function generated for it (as events/avro_writer.py writes them): the projector decodes every
record, and a call per field was most of the time.
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
        return _compile_record(schema, named)
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


def _compile_record(schema: Any, named: dict[str, Reader]) -> Reader:
    """One generated function per record: its fields read in a row, without a call per field
    for the common shapes (a string, a one-byte long, an enum symbol, an empty array or map, a
    union's null, string or long branch; its other branches by their reader, without the
    union's) — a call per field was most of a record's reading time. Whatever else a field
    holds (a longer varint, a bad index, a non-minimal encoding) goes to the field's compiled
    reader, which reads it or raises as before."""
    name = schema["name"]
    compiled: list[Reader] = []

    def read_recursive(buf: bytes, pos: int) -> tuple[Any, int]:  # a reference from inside itself
        return compiled[0](buf, pos)

    named[name] = read_recursive
    namespace: dict[str, Any] = {"_read_long": _read_long, "_read_string": _read_string}
    lines = ["def read_record(buf, pos):", "    size = len(buf)"]
    for i, f in enumerate(schema["fields"]):
        if isinstance(f["type"], list):  # its branches' readers are for the inline dispatch too
            namespace[f"u{i}"], namespace[f"t{i}"] = parts = _union_parts(f["type"], named)
            namespace[f"r{i}"] = _compile_union(f["type"], named, parts)
        else:
            namespace[f"r{i}"] = compile_reader(f["type"], named)
        lines.extend("    " + line for line in _field_lines(f["type"], i, namespace))
    values = ", ".join(f"{f['name']!r}: v{i}" for i, f in enumerate(schema["fields"]))
    lines.append(f"    return {{{values}}}, pos")
    exec("\n".join(lines), namespace)  # noqa: S102 - source built above from the schema's field names (repr)
    read: Reader = namespace["read_record"]
    compiled.append(read)
    named[name] = read
    return read


def _string_lines(v: str, at: str) -> list[str]:
    """Source reading a string at ``pos + at`` into ``v`` when its length takes one byte (the
    usual case), else through _read_string (a longer or a non-minimal length, or an error)."""
    start = "pos" if at == "0" else f"pos + {at}"
    return [
        f"n = buf[{start}]",
        "if n < 0x80 and not n & 1:",
        f"    end = {start} + 1 + (n >> 1)",
        "    if end > size:",
        f"        raise EOFError(f'{{n >> 1}} bytes announced, {{size - ({start}) - 1}} left')",
        f"    {v} = buf[{start} + 1 : end].decode()",  # invalid UTF-8 raises UnicodeDecodeError
        "    pos = end",
        "else:",
        f"    {v}, pos = _read_string(buf, {start})",
    ]


def _long_lines(v: str, at: str) -> list[str]:
    """Source reading a long at ``pos + at`` into ``v``: inline when it takes one byte."""
    start = "pos" if at == "0" else f"pos + {at}"
    return [
        f"b = buf[{start}]",
        "if b < 0x80:",
        f"    {v} = (b >> 1) ^ -(b & 1)",
        f"    pos = {start} + 1",
        "else:",
        f"    {v}, pos = _read_long(buf, {start})",
    ]


def _field_lines(field_type: Any, i: int, namespace: dict[str, Any]) -> list[str]:
    """Source reading field ``i`` (of ``field_type``) into ``v{i}``: inline for the common
    shapes, else ``r{i}`` (the field's compiled reader), which reads those shapes alike."""
    v, call = f"v{i}", f"v{i}, pos = r{i}(buf, pos)"
    if field_type == "string":
        return _string_lines(v, "0")
    if field_type == "long":
        return _long_lines(v, "0")
    if isinstance(field_type, dict) and field_type.get("type") == "enum" and len(field_type["symbols"]) <= 64:
        namespace[f"s{i}"] = tuple(field_type["symbols"])
        # A one-byte even varint below 2 * len(symbols) is a valid index; anything else
        # (a negative or too large index, a longer varint) is for r{i} to read or refuse.
        limit = 2 * len(field_type["symbols"])
        return [
            "b = buf[pos]",
            f"if b < {limit} and not b & 1:",
            f"    {v} = s{i}[b >> 1]",
            "    pos += 1",
            "else:",
            "    " + call,
        ]
    if isinstance(field_type, dict) and field_type.get("type") in ("array", "map"):
        empty = "[]" if field_type["type"] == "array" else "{}"
        return ["if buf[pos] == 0:", f"    {v} = {empty}", "    pos += 1", "else:", "    " + call]
    if isinstance(field_type, list) and field_type:
        return _union_lines(field_type, i, namespace[f"t{i}"])
    return [call]


def _union_parts(branches: list[Any], named: dict[str, Reader]) -> tuple[tuple[Reader, ...], tuple[str | None, ...]]:
    """Each branch's reader, and the name its values are tagged with (None: a bare value)."""
    readers = tuple(compile_reader(b, named) for b in branches)
    names = [b.get("name") if isinstance(b, dict) else None if b in _PRIMITIVES else b for b in branches]
    # Like fastavro's return_named_type_override: a union with one named type gives bare values.
    tags = tuple(names) if sum(n is not None for n in names) > 1 else (None,) * len(names)
    return readers, tags


def _union_lines(branches: list[Any], i: int, tags: tuple[str | None, ...]) -> list[str]:
    """Source reading union field ``i`` into ``v{i}`` when its index takes one byte: null and
    an untagged string or long inline, any other branch by its reader ``u{i}[index]``. A
    negative or too large index (an odd byte, or one past the branches) or a longer varint
    goes to ``r{i}``, which reads it or refuses it."""
    v, lines = f"v{i}", ["b = buf[pos]"]
    for k, branch in enumerate(branches[:64]):
        if branch == "null":
            lines += [f"{'elif' if len(lines) > 1 else 'if'} b == {2 * k}:", f"    {v} = None", "    pos += 1"]
        elif branch in ("string", "long") and tags[k] is None:
            value_lines = _string_lines(v, "1") if branch == "string" else _long_lines(v, "1")
            lines += [f"{'elif' if len(lines) > 1 else 'if'} b == {2 * k}:", *("    " + line for line in value_lines)]
    if any(b not in ("null", "string", "long") or tags[k] is not None for k, b in enumerate(branches[:64])):
        limit = 2 * min(len(branches), 64)
        lines += [
            f"{'elif' if len(lines) > 1 else 'if'} b < {limit} and not b & 1:",
            f"    x, pos = u{i}[b >> 1](buf, pos + 1)",
        ]
        # As read_union: a named branch's value is tagged in a union of several named types.
        lines += [f"    t = t{i}[b >> 1]", f"    {v} = x if t is None else (t, x)"] if any(tags) else [f"    {v} = x"]
    return [*lines, "else:", f"    {v}, pos = r{i}(buf, pos)"]


def _compile_union(
    branches: list[Any],
    named: dict[str, Reader],
    parts: tuple[tuple[Reader, ...], tuple[str | None, ...]] | None = None,
) -> Reader:
    readers, tags = _union_parts(branches, named) if parts is None else parts

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
