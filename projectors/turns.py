"""What a turn is: the one definition the window, context assembly and the summarizer use.

A **turn** starts at a user message and runs to the next user message: the assistant's
replies, its tool calls and their results belong to the turn of the question they answer
(DESIGN.md, "Turns, windows and the valid-context rules").

Two kinds of message belong to no turn:

- system messages: they are served first with every context, whatever the window holds;
- the messages of a range before its first user message — its *preamble*, say a greeting
  the assistant opened the conversation with. A context cannot start with them (rule 2: the
  first non-system message is a user message), so context assembly leaves them out; the
  summarizer folds them in together with the first turn it summarizes.

Whether a message can be *used* (redacted, erased, flagged) does not move a turn's
boundaries: a redacted question still starts its turn, and the consumers decide what an
unusable message means for the turn it is in.

Pure functions; the projector's window (``projectors.window``) advances at each message
:func:`starts_turn` names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

__all__ = ["Turns", "in_a_turn", "split_turns", "split_turns_by", "starts_turn"]

T = TypeVar("T")


class _HasRole(Protocol):
    @property
    def role(self) -> str: ...


M = TypeVar("M", bound=_HasRole)


def starts_turn(role: str) -> bool:
    """Whether a message of ``role`` starts a turn."""
    return role == "user"


def in_a_turn(role: str) -> bool:
    """Whether a message of ``role`` belongs to a turn (system messages belong to none)."""
    return role != "system"


@dataclass(frozen=True, slots=True)
class Turns(Generic[T]):
    """A range of messages split into turns, in log order."""

    preamble: tuple[T, ...]  # before the first user message: in no turn
    turns: tuple[tuple[T, ...], ...]  # each starts with its user message


def split_turns_by(items: Iterable[T], role: Callable[[T], str]) -> Turns[T]:
    """:func:`split_turns` of anything whose role ``role`` tells."""
    preamble: list[T] = []
    turns: list[list[T]] = []
    for item in items:
        r = role(item)
        if not in_a_turn(r):
            continue
        if starts_turn(r):
            turns.append([item])
        elif turns:
            turns[-1].append(item)
        else:
            preamble.append(item)
    return Turns(tuple(preamble), tuple(map(tuple, turns)))


def _role(message: _HasRole) -> str:
    return message.role


def split_turns(messages: Iterable[M]) -> Turns[M]:
    """``messages`` (in log order) split into their preamble and their turns; system messages
    are left out."""
    return split_turns_by(messages, _role)
