"""Strings the read models cannot hold: Postgres text and jsonb refuse U+0000 and lone
surrogates, so every string of an event, at any depth, is checked before it may enter the log
(events/validation.py) and again by the projector on every record it reads — hence the fast walk.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from events.errors import InvalidEventError
from events.event_types import (
    BODY_TYPES,
    Event,
    ImagePart,
    MediaBlock,
    OpaqueBlock,
    ReasoningBlock,
    TextBlock,
    TextPart,
    ToolCall,
    ToolCallBlock,
    Usage,
)
from events.keys import ConversationKey

__all__ = ["MODEL_CLASSES", "check_storable", "storable", "unstorable_char"]

# Every dataclass an event is made of, besides the envelope.
MODEL_CLASSES: tuple[type, ...] = (
    *BODY_TYPES,
    TextPart,
    ImagePart,
    ToolCall,
    Usage,
    TextBlock,
    MediaBlock,
    ToolCallBlock,
    ReasoningBlock,
    OpaqueBlock,
)

# What Postgres text and jsonb cannot hold in a UTF-8 database (tests/test_api_edge.py checks
# every code point against a real server): U+0000, as a character in text or as the escape
# \u0000 json.dumps writes for jsonb (SQLSTATE 22P05); and lone surrogates, which are not
# Unicode scalar values and cannot even be encoded to UTF-8. Every other code point is stored.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# Per model class, the fields to walk and the name each has in an error's field path: the body's
# and the key's fields are named as they are in the HTTP API (``content``, not ``body.content``).
_WALKED: dict[type, tuple[tuple[str, str], ...]] = {
    Event: (("event_id", "event_id"), ("key", ""), ("producer", "producer"), ("body", "")),
    ConversationKey: tuple((part, part) for part in ("tenant_id", "user_id", "conversation_id")),
    **{cls: tuple((f.name, f.name) for f in dataclasses.fields(cls)) for cls in MODEL_CLASSES},
}


def unstorable_char(value: str) -> str | None:
    """The first character of ``value`` a Postgres text or jsonb value cannot hold, if any."""
    found = _UNSTORABLE.search(value)
    return None if found is None else found.group()


def check_storable(event: Event) -> None:
    """Every string of the event, at any depth, must be one the read models can hold."""
    if storable(event):  # the fast walk (the projector validates every record it reads)
        return
    path = _unstorable_path(event)
    if path is None:  # pragma: no cover - both walks visit the same strings
        return
    where, text = path
    field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in where if p != "").lstrip(".")
    char = unstorable_char(text) or ""
    what = "U+0000 (NUL)" if char == "\x00" else f"a lone surrogate U+{ord(char):04X}"
    raise InvalidEventError(f"contains {what}, which Postgres text and jsonb cannot store", field=field or None)


def _bad(text: str) -> bool:
    # An ASCII string holds no surrogate: a NUL is all to look for (memchr, not a regex). Any
    # other string: a NUL, or a surrogate, which is exactly what UTF-8 cannot encode (strict
    # encoding is a C loop, three times as fast as the regex on CJK text).
    if "\x00" in text:
        return True
    if text.isascii():
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


_LEAVES = frozenset({type(None), bool, int, float, datetime})
# All of an object's walked fields in one C call (attrgetter of one name returns no tuple:
# name it twice).
_GETTERS: dict[type, Callable[[object], tuple[object, ...]]] = {
    cls: operator.attrgetter(*[attr for attr, _ in fields] * (1 if len(fields) > 1 else 2))
    for cls, fields in _WALKED.items()
}


def _keys_and_values(mapping: Any) -> tuple[object, ...]:
    return (*mapping, *mapping.values())


def _same(items: Any) -> tuple[object, ...]:
    return cast("tuple[object, ...]", items)  # a list walks as well as a tuple


_GETTERS.update({tuple: _same, list: _same, dict: _keys_and_values})


def storable(value: object) -> bool:
    """True when no string of ``value`` is unstorable. The projector validates every record it
    reads, so this is the fast walk (about a microsecond an event): the event model's own
    shapes by exact type, each object's fields fetched in one call, empty ones skipped; the
    general walk for any other type. (Values are ``Any`` here: ``type(x) is`` does not narrow,
    and a ``cast`` is a function call per string.)"""
    item: Any = value
    kind = type(item)
    if kind is str:
        return not _bad(item)
    if kind in _LEAVES:
        return True
    getter = _GETTERS.get(kind)
    if getter is None:
        return _unstorable_path(value) is None
    items: Sequence[Any] = getter(item)
    for item in items:
        if not item:  # None, "", 0 and empty containers: most optional fields, nothing to look at
            continue
        kind = type(item)
        if kind is str:  # _bad, inlined: most of an event's strings are walked here
            if "\x00" in item:
                return False
            if not item.isascii():
                try:
                    item.encode()
                except UnicodeEncodeError:
                    return False
        elif kind not in _LEAVES and not storable(item):
            return False
    return True


def _unstorable_path(value: object) -> tuple[list[str | int], str] | None:
    """Where the first unstorable string is (a path of field names, keys and indexes) and the
    string; built only on the way back from a find, so a valid event costs no path strings.
    A bad mapping key is reported at the mapping (its name is the bad string itself)."""
    if isinstance(value, str):
        return ([], value) if _UNSTORABLE.search(value) else None
    if value is None or isinstance(value, int | float | bytes | datetime):
        return None
    fields = _WALKED.get(type(value))
    if fields is not None or dataclasses.is_dataclass(value):
        for attr, label in fields or _walked_fields(type(value)):
            found = _unstorable_path(getattr(value, attr))
            if found is not None:
                found[0].insert(0, label)
                return found
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str) and _UNSTORABLE.search(k):
                return [], k
            found = _unstorable_path(v)
            if found is not None:
                found[0].insert(0, str(k))
                return found
    elif isinstance(value, Sequence):
        for i, item in enumerate(value):
            found = _unstorable_path(item)
            if found is not None:
                found[0].insert(0, i)
                return found
    return None


def _walked_fields(cls: type) -> tuple[tuple[str, str], ...]:
    """Every field of a model dataclass, named as itself (computed once per class)."""
    fields = _WALKED[cls] = tuple((f.name, f.name) for f in dataclasses.fields(cls))
    return fields
