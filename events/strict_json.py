"""JSON text from clients, read and written strictly (RFC 8259), in one place.

Python's ``json`` accepts and writes ``NaN``, ``Infinity`` and ``-Infinity``, which are not
JSON: a provider handed tool-call arguments holding them answers HTTP 400, turns later. It
also raises ``RecursionError`` for deep nesting and a bare ``ValueError`` for integers of
more than 4300 digits. Everything here raises :class:`NotJsonError` (a ``ValueError`` too) instead.

Two more things JSON parsers disagree on are refused in client text: an object that names a key
twice (RFC 8259 §4 leaves the meaning open: Python and most parsers keep the last value, others
the first or refuse, so a proxy that checked ``"role": "user"`` and convlog that stored the later
``"role": "assistant"`` would each be right), and bytes that are not UTF-8 (§8.1: JSON exchanged
between systems is UTF-8; a UTF-16 or UTF-32 text is refused, a UTF-8 byte order mark ignored as
§8.1 allows). Text read back from the log or the read models is read with ``stored=True``.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

from events.errors import ConvlogError


class NotJsonError(ConvlogError, ValueError):
    """The text is not strict JSON (or not UTF-8, or nested too deep to read)."""

    code = "not_json"


def _refuse_constant(name: str) -> NoReturn:
    raise NotJsonError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc = dict(pairs)
    if len(doc) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise NotJsonError(
                    f"the key {key[:100]!r} appears twice in one object, and JSON parsers "
                    "disagree on which value counts: send it once"
                )
            seen.add(key)
    return doc


# Built once: json.loads with any option builds a new decoder on every call.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
_STORED = json.JSONDecoder(parse_constant=_refuse_constant)


def parse_json(text: str | bytes, *, stored: bool = False) -> Any:
    """``json.loads`` that refuses the non-standard constants, duplicate keys and bytes that are
    not UTF-8; raises :class:`NotJsonError`. ``stored``: text from the log or the read models
    (another producer's, or appended before convlog refused duplicate keys), where a duplicated
    key's last value counts, as ``json`` reads it — the same for every format it is served in."""
    try:
        if isinstance(text, bytes):
            text = _utf8(text)
        return (_STORED if stored else _DECODER).decode(text)
    except NotJsonError:
        raise
    except RecursionError as e:
        raise NotJsonError("not JSON this API reads: nested too deep") from e
    except json.JSONDecodeError as e:
        raise NotJsonError(f"not valid JSON: {e}") from e
    except ValueError as e:  # UnicodeDecodeError, and ints past sys.get_int_max_str_digits()
        raise NotJsonError(f"not JSON this API reads: {e}") from e


def _utf8(text: bytes) -> str:
    encoding = json.detect_encoding(text)  # by the first bytes: UTF-8, -16 or -32, BOM or not
    if encoding not in ("utf-8", "utf-8-sig"):
        raise NotJsonError(f"the text is {encoding.upper()}; JSON sent between systems must be UTF-8 (RFC 8259 §8.1)")
    return text.decode(encoding, "surrogatepass")  # a UTF-8 BOM dropped, as §8.1 allows


def dump_json(value: Any) -> str:
    """Compact JSON text of ``value``, refusing NaN and Infinity; raises :class:`NotJsonError`."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except RecursionError as e:
        raise NotJsonError("nested too deep to write as JSON") from e
    except (TypeError, ValueError) as e:
        raise NotJsonError(f"cannot be written as strict JSON: {e}") from e


# The one compact encoder, built once (json.dumps with options builds a new encoder per call):
# what the projection stores in jsonb columns and what token accounting counts for a value.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def compact_json(value: Any) -> str:
    """Compact JSON text of ``value`` (no spaces, non-ASCII kept), as Python writes JSON-native
    values; raises ``TypeError`` for any other. For client text use :func:`dump_json`."""
    return _COMPACT.encode(value)
