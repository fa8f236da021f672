"""The type checks every native parser makes of the keys it knows (the provider SDKs' own types:
``anthropic.types``, ``openai.types.responses``, ``google.genai.types``): a known key of the
wrong type is refused with its exact JSON path, so nothing of a type the provider would refuse
is stored and served back to it. Unknown keys stay opaque (kept verbatim, never checked). Each
format's tables are its package's ``schema.py`` (events/formats/<format>/schema.py); the
checks are here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

from events.errors import NativeFormatError

__all__ = ["Kinds", "check_counts", "check_fields", "join"]

Kinds: TypeAlias = type | frozenset[str] | tuple[type | frozenset[str] | None, ...]
"""A key's JSON types: ``str``, ``int``, ``bool``, ``list``, ``dict`` (an object), ``None`` (null),
or a set of strings (an enum)."""

_NAMES = {str: "a string", int: "an integer", bool: "a boolean", list: "a list", dict: "an object", float: "a number"}


def join(at: str, key: str) -> str:
    return f"{at}.{key}" if at else key


def _is(value: Any, kinds: tuple[type | frozenset[str] | None, ...]) -> bool:
    if value is None:
        return None in kinds
    if isinstance(value, bool):  # a JSON true is no integer
        return bool in kinds
    for k in kinds:
        if isinstance(k, frozenset):
            if isinstance(value, str) and value in k:
                return True
        elif k is not None and isinstance(value, Mapping if k is dict else k):
            return True
    return False


def _name(kind: type | frozenset[str] | None) -> str:
    if kind is None:
        return "null"
    if isinstance(kind, frozenset):
        return "one of " + ", ".join(sorted(kind))
    return _NAMES.get(kind, kind.__name__)


def check_fields(obj: Mapping[str, Any], schema: Mapping[str, Kinds], at: str, code: str) -> None:
    """Each key of ``schema`` that ``obj`` has holds one of its kinds; else
    :class:`NativeFormatError` (``code``) at ``at.key``."""
    for key, kinds in schema.items():
        if key in obj:
            allowed = kinds if isinstance(kinds, tuple) else (kinds,)
            if not _is(obj[key], allowed):
                names = " or ".join(_name(k) for k in allowed)
                raise NativeFormatError(f"must be {names}", field=join(at, key), code=code)


def check_counts(obj: Mapping[str, Any], keys: Iterable[str], at: str, code: str) -> None:
    """Each of ``keys`` that ``obj`` has is a token count: a non-negative integer, or null."""
    for key in keys:
        value = obj.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise NativeFormatError("must be a non-negative integer", field=join(at, key), code=code)
