"""A faster constructor for frozen, slotted dataclasses: the decoder's events, the rows of a context.

A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__`` (its own
``__setattr__`` refuses); for a message's 16 fields that is ~1.4 µs, a sixth of decoding a
record. Setting the slots through their member descriptors makes the same object in half the
time. Only for a class whose ``__init__`` does nothing else — every field in it, no
``__post_init__`` — else the class itself is returned, so a validation added to a class later
is never skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def slot_builder(cls: type[T], *, positional: bool = False) -> Callable[..., T]:
    """``cls(**fields)`` for keyword arguments naming every field (no defaults); with
    ``positional``, ``cls(*values)`` from one sequence of every field's value, in field order
    (a database row)."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]  # a dataclass, checked by fields()
    # fields() leaves out ClassVar and InitVar pseudo-fields; an InitVar only means something
    # to a __post_init__, which disqualifies the class anyway.
    if "__slots__" not in cls.__dict__ or hasattr(cls, "__post_init__") or not all(f.init for f in fields):
        return (lambda values: cls(*values)) if positional else cls
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    head = "def build(v):" if positional else f"def build(*, {', '.join(f.name for f in fields)}):"
    lines = [head, "    o = new(cls)"]
    for i, f in enumerate(fields):
        namespace[f"set{i}"] = cls.__dict__[f.name].__set__
        lines.append(f"    set{i}(o, v[{i}])" if positional else f"    set{i}(o, {f.name})")
    lines.append("    return o")
    exec("\n".join(lines), namespace)  # noqa: S102 - source built from the dataclass's field names
    build: Callable[..., T] = namespace["build"]
    return build
