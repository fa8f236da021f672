"""JSON text from clients, read and written strictly (RFC 8259), in one place.

Python's ``json`` accepts and writes ``NaN``, ``Infinity`` and ``-Infinity``, which are not
JSON: a provider handed tool-call arguments holding them answers HTTP 400, turns later. It
also raises ``RecursionError`` for deep nesting and a bare ``ValueError`` for integers of
more than 4300 digits. Everything here raises :class:`NotJsonError` (a ``ValueError`` too) instead.
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


# Built once: json.loads with any option builds a new decoder on every call.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def parse_json(text: str | bytes) -> Any:
    """``json.loads`` that refuses the non-standard constants; raises :class:`NotJsonError`."""
    try:
        if isinstance(text, bytes):  # as json.loads reads bytes: UTF-8, -16 or -32 by the first bytes
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        return _DECODER.decode(text)
    except NotJsonError:
        raise
    except RecursionError as e:
        raise NotJsonError("not JSON this API reads: nested too deep") from e
    except json.JSONDecodeError as e:
        raise NotJsonError(f"not valid JSON: {e}") from e
    except ValueError as e:  # UnicodeDecodeError, and ints past sys.get_int_max_str_digits()
        raise NotJsonError(f"not JSON this API reads: {e}") from e


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
