"""events.slot_builder: the decoder's constructor makes the objects the classes' own __init__ makes."""

from __future__ import annotations

import dataclasses

import pytest

from events.event_types import BODY_TYPES, Event, MessageAppended, Usage
from events.keys import ConversationKey
from events.slot_builder import slot_builder


def _values(cls: type) -> dict[str, object]:
    """A distinct value per field, whatever its type (equality is all that is compared)."""
    return {f.name: f"{cls.__name__}.{f.name}" for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("cls", [Event, Usage, *BODY_TYPES], ids=lambda c: c.__name__)
def test_builds_what_the_constructor_builds(cls: type) -> None:
    values = _values(cls)
    built = slot_builder(cls)(**values)
    assert type(built) is cls
    assert built == cls(**values)
    assert hash(built) == hash(cls(**values))


def test_what_it_builds_stays_frozen() -> None:
    message = slot_builder(MessageAppended)(**_values(MessageAppended))
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.role = "user"  # type: ignore[misc]


def test_every_field_is_required() -> None:
    with pytest.raises(TypeError):
        slot_builder(MessageAppended)(message_id="m", role="user")


def test_a_class_whose_init_does_more_is_built_by_its_own_init() -> None:
    assert slot_builder(ConversationKey) is ConversationKey  # __post_init__ validates and encodes
    key = slot_builder(ConversationKey)("t", "u", "c")
    assert str(key) == "t:u:c"


def test_a_class_without_slots_is_built_by_its_own_init() -> None:
    @dataclasses.dataclass(frozen=True)
    class Plain:
        a: int

    assert slot_builder(Plain) is Plain


def test_a_positional_builder_takes_a_row_in_field_order() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Row:
        a: int
        b: str

    built = slot_builder(Row, positional=True)((1, "x"))
    assert built == Row(1, "x")

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            if self.a < 0:
                raise ValueError("negative")

    with pytest.raises(ValueError, match="negative"):  # its own __init__, validation included
        slot_builder(Checked, positional=True)((-1,))
