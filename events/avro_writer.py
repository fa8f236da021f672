"""An Avro binary writer compiled once from a (fastavro-parsed) schema.

Why not fastavro's writer on the hot path: it walks the schema for every record and, for
each union, tries the branches one by one; for a convlog event that is ~17 µs, more than
validating the event and framing it together, and the producer's throughput target leaves no
room for it. This writer is specialised to the schema at load time (~5 µs). It accepts the
values fastavro accepts for convlog's schemas — records as dicts, named union branches as
``(name, value)`` tuples — and tests check that both write identical bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final, TypeAlias

Writer: TypeAlias = Callable[[Any, bytearray], None]

_INT_MIN: Final = -(1 << 31)
_INT_MAX: Final = (1 << 31) - 1
_LONG_MIN: Final = -(1 << 63)
_LONG_MAX: Final = (1 << 63) - 1
_REQUIRED: Final = object()  # marks a record field without a default


def _write_long(value: int, out: bytearray) -> None:
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise OverflowError(f"{value} does not fit in an Avro long")
    n = (value << 1) ^ (value >> 63)
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_int(value: int, out: bytearray) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an int, got {type(value).__name__}")
    if not _INT_MIN <= value <= _INT_MAX:
        raise OverflowError(f"{value} does not fit in an Avro int")
    _write_long(value, out)


def _write_checked_long(value: int, out: bytearray) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an int, got {type(value).__name__}")
    _write_long(value, out)


def _write_bytes(value: bytes, out: bytearray) -> None:
    if not isinstance(value, bytes | bytearray):
        raise TypeError(f"expected bytes, got {type(value).__name__}")
    _write_long(len(value), out)
    out += value


def _write_string(value: str, out: bytearray) -> None:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__}")
    raw = value.encode()  # a lone surrogate raises UnicodeEncodeError, a ValueError
    _write_long(len(raw), out)
    out += raw


def _write_boolean(value: bool, out: bytearray) -> None:  # noqa: FBT001 - a writer's signature
    if not isinstance(value, bool):
        raise TypeError(f"expected a bool, got {type(value).__name__}")
    out.append(1 if value else 0)


def _write_null(value: None, _out: bytearray) -> None:
    if value is not None:
        raise TypeError(f"expected null, got {type(value).__name__}")


def _struct_writer(fmt: str) -> Writer:
    pack = struct.Struct(fmt).pack

    def write(value: float, out: bytearray) -> None:
        out += pack(value)

    return write


_PRIMITIVES: Final[dict[str, Writer]] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": _write_int,
    "long": _write_checked_long,
    "float": _struct_writer("<f"),
    "double": _struct_writer("<d"),
    "bytes": _write_bytes,
    "string": _write_string,
}

# Which Python values a union branch takes when no (name, value) tuple says which.
_ACCEPTS: Final[dict[str, Callable[[Any], bool]]] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, float | int) and not isinstance(v, bool),
    "double": lambda v: isinstance(v, float | int) and not isinstance(v, bool),
    "bytes": lambda v: isinstance(v, bytes | bytearray),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list | tuple),
    "map": lambda v: isinstance(v, dict),
    "record": lambda v: isinstance(v, dict),
    "enum": lambda v: isinstance(v, str),  # no convlog union holds both a string and an enum
}


def compile_writer(schema: Any, named: dict[str, Writer], kinds: dict[str, str] | None = None) -> Writer:
    """A writer for one (fastavro-parsed) schema; raises TypeError/ValueError/KeyError/
    OverflowError for values that do not fit it. ``kinds`` maps named types to record/enum."""
    kinds = {} if kinds is None else kinds
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]

        def write_named(value: Any, out: bytearray) -> None:  # a recursive reference
            named[schema](value, out)

        return named.get(schema, write_named)
    if isinstance(schema, list):
        return _compile_union(schema, named, kinds)
    kind = schema["type"]
    if kind in ("record", "error"):
        return _compile_record(schema, named, kinds)
    if kind == "enum":
        index = {symbol: i for i, symbol in enumerate(schema["symbols"])}

        def write_enum(value: str, out: bytearray) -> None:
            _write_long(index[value], out)

        named[schema["name"]], kinds[schema["name"]] = write_enum, "enum"
        return write_enum
    if kind in ("array", "map"):
        return _compile_blocks(
            compile_writer(schema["items" if kind == "array" else "values"], named, kinds),
            is_map=kind == "map",
        )
    if kind == "fixed":
        raise ValueError("fixed is not used by convlog schemas")
    return _PRIMITIVES[kind]


def _compile_record(schema: Any, named: dict[str, Writer], kinds: dict[str, str]) -> Writer:
    """One generated function per record: its fields written in a row, without a call per
    field for the common shapes (a string, an absent optional, an empty map or array) — a
    call per field was most of an event's encoding time. Every other value goes to the
    field's compiled writer, which also raises for values that do not fit."""
    name = schema["name"]
    compiled: list[Writer] = []

    def write_recursive(value: Any, out: bytearray) -> None:  # a reference from inside itself
        compiled[0](value, out)

    named[name], kinds[name] = write_recursive, "record"
    namespace: dict[str, Any] = {"_write_long": _write_long}
    lines = ["def write_record(value, out):"]
    for i, f in enumerate(schema["fields"]):
        namespace[f"w{i}"] = compile_writer(f["type"], named, kinds)
        # A field the value lacks takes the schema's default (as fastavro does): records
        # built for an older version still write under a newer one.
        if "default" in f:
            namespace[f"d{i}"] = f["default"]
            lines.append(f"    v = value.get({f['name']!r}, d{i})")
        else:
            lines.append(f"    v = value[{f['name']!r}]")
        lines.extend("    " + line for line in _field_lines(f["type"], f"w{i}", kinds, namespace))
    lines.append("    return None")
    exec("\n".join(lines), namespace)  # noqa: S102 - source built above from the schema's field names (repr)
    write: Writer = namespace["write_record"]
    compiled.append(write)
    named[name] = write
    return write


def compile_object_writer(
    schema: Any,
    named: dict[str, Writer],
    kinds: dict[str, str],
    *,
    fetch: dict[str, str],
    writers: dict[str, Writer],
    namespace: dict[str, Any],
) -> Writer:
    """A writer of the record ``schema`` from an object instead of a dict (no record to build
    first): field ``f`` is the Python expression ``fetch[f]`` over ``value`` (names it uses come
    from ``namespace``), or ``value.f``; it is written by ``writers[f]`` or as the field's type.
    Every value is fetched before any is written, as when the record was built first. ``named``
    and ``kinds`` must hold the schema's named types (a writer compiled from the whole schema)."""
    named, kinds = dict(named), dict(kinds)  # compiling the fields again must not replace the codec's own
    ns: dict[str, Any] = {**namespace, "_write_long": _write_long}
    fields = schema["fields"]
    lines = ["def write_object(value, out):"]
    lines += [f"    v{i} = {fetch.get(f['name'], 'value.' + f['name'])}" for i, f in enumerate(fields)]
    for i, f in enumerate(fields):
        ns[f"w{i}"] = writers.get(f["name"]) or compile_writer(f["type"], named, kinds)
        lines.append(f"    v = v{i}")
        if f["name"] in writers:
            lines.append(f"    w{i}(v, out)")
        else:
            lines.extend("    " + line for line in _field_lines(f["type"], f"w{i}", kinds, ns))
    lines.append("    return None")
    exec("\n".join(lines), ns)  # noqa: S102 - source built from the schema's field names and the caller's expressions
    write: Writer = ns["write_object"]
    return write


_STRING_LINES: Final = (
    "b = v.encode()",  # a lone surrogate raises UnicodeEncodeError, a ValueError
    "n = len(b)",
    "if n < 64:",
    "    out.append(n << 1)",  # zigzag(n), one byte
    "else:",
    "    _write_long(n, out)",
    "out += b",
)


def _field_lines(field_type: Any, writer: str, kinds: dict[str, str], namespace: dict[str, Any]) -> list[str]:
    """Source writing ``v`` as ``field_type``: inline for the common shapes, else ``writer``
    (the field's compiled writer), which writes the same bytes for those shapes too."""
    call = f"{writer}(v, out)"
    if field_type == "string":
        return ["if type(v) is str:", *("    " + line for line in _STRING_LINES), "else:", "    " + call]
    if isinstance(field_type, dict) and field_type.get("type") == "enum":
        # The symbol's index, zigzagged and varint-encoded once; an unknown one raises in writer.
        symbols = {s: _long_bytes(i) for i, s in enumerate(field_type["symbols"])}
        namespace[f"{writer}_symbols"] = symbols
        return [
            f"b = {writer}_symbols.get(v) if type(v) is str else None",
            "if b is None:",
            "    " + call,
            "else:",
            "    out += b",
        ]
    if isinstance(field_type, list):
        # As write_union picks: None only fits null; a str fits the first string or enum branch.
        branch_kinds = [_branch_kind(b, kinds) for b in field_type]
        lines = []
        if "null" in branch_kinds and branch_kinds.index("null") < 64:
            lines += ["if v is None:", f"    out.append({branch_kinds.index('null') << 1})"]
        text = next((i for i, kind in enumerate(branch_kinds) if kind in ("string", "enum")), None)
        if text is not None and branch_kinds[text] == "string" and text < 64:
            lines += [f"{'elif' if lines else 'if'} type(v) is str:", f"    out.append({text << 1})"]
            lines += ["    " + line for line in _STRING_LINES]
        return [*lines, "else:", "    " + call] if lines else [call]
    if isinstance(field_type, dict) and field_type.get("type") in ("array", "map"):
        return ["if not v:", "    out.append(0)", "else:", "    " + call]  # as _compile_blocks writes it
    return [call]


def _long_bytes(value: int) -> bytes:
    out = bytearray()
    _write_long(value, out)
    return bytes(out)


def _branch_name(branch: Any) -> str:
    return branch["name"] if isinstance(branch, dict) and "name" in branch else str(branch)


def _branch_kind(branch: Any, named_kinds: dict[str, str]) -> str:
    if isinstance(branch, dict):
        return str(branch["type"])
    return named_kinds.get(str(branch), str(branch))


def _compile_union(branches: list[Any], named: dict[str, Writer], named_kinds: dict[str, str]) -> Writer:
    writers = [compile_writer(b, named, named_kinds) for b in branches]
    by_name = {_branch_name(b): (i, w) for i, (b, w) in enumerate(zip(branches, writers, strict=True))}
    kinds = [_branch_kind(b, named_kinds) for b in branches]
    candidates = [(i, _ACCEPTS[kind], w) for i, (kind, w) in enumerate(zip(kinds, writers, strict=True))]

    def write_union(value: Any, out: bytearray) -> None:
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and value[0] in by_name:
            i, write = by_name[value[0]]
            if i < 64:
                out.append(i << 1)  # zigzag(i), one byte
            else:
                _write_long(i, out)
            write(value[1], out)
            return
        for i, accepts, write in candidates:
            if accepts(value):
                _write_long(i, out)
                write(value, out)
                return
        raise TypeError(f"{type(value).__name__} fits no branch of union {[_branch_name(b) for b in branches]}")

    if len(branches) == 2 and branches[0] == "null":
        write_value = writers[1]

        def write_optional(value: Any, out: bytearray) -> None:  # the usual ["null", T]
            if value is None:
                out.append(0)
            elif isinstance(value, tuple) and kinds[1] != "array":
                write_union(value, out)
            else:
                out.append(2)  # zigzag(1)
                write_value(value, out)

        return write_optional
    return write_union


def _compile_blocks(write_item: Writer, *, is_map: bool) -> Writer:
    def write_blocks(value: Any, out: bytearray) -> None:
        if value:
            _write_long(len(value), out)
            if is_map:
                for key, item in value.items():
                    _write_string(key, out)
                    write_item(item, out)
            else:
                for item in value:
                    write_item(item, out)
        out.append(0)

    return write_blocks
