"""Provider formats on the append side: a provider's native payload to neutral messages.

One package per format (``chat_completions``, ``anthropic``, ``responses``, ``gemini``), each
one :class:`~events.formats.provider.ProviderFormat` whose ``parse`` has the :class:`Parser`
signature, all listed in :mod:`events.formats.registry`. A payload that breaks its format raises
:class:`~events.errors.NativeFormatError` with a stable ``code`` and the JSON path; unknown
*block types* inside a valid message are kept as :class:`~events.blocks.OpaqueBlock`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from events.errors import EventTooLargeError, InvalidEventError
from events.event_types import MessageAppended

__all__ = ["Parsed", "Parser", "at_path"]


@dataclass(frozen=True, slots=True)
class Parsed:
    """The neutral messages of one native payload, in order (appended as one atomic batch), and
    the provider's own id of the payload when it has one (an Anthropic ``msg_…``, a Responses
    ``resp_…``, a Gemini ``responseId``): the producer derives event ids from it, so the same
    response appended twice is one append. ``answer_paths``: per tool message's id, the JSON path
    in the payload of what names the call it answers (``content[0].tool_use_id``), so an answer to
    no open call is refused at its own place."""

    messages: tuple[MessageAppended, ...]
    native_id: str | None = None
    answer_paths: Mapping[str, str] = field(default_factory=dict)


class Parser(Protocol):
    def __call__(self, payload: object, *, new_id: Callable[[], str]) -> Parsed:
        """``new_id()`` gives the next message id where the payload names none for a message
        (called in message order, so a repeated payload gets the same ids)."""
        ...


def at_path(error: InvalidEventError, prefix: str) -> InvalidEventError:
    """``error`` with ``prefix`` before its field (``[2]`` + ``content`` -> ``[2].content``): the
    same class and code. A too-large event has no path inside the payload: it comes back as is."""
    if isinstance(error, EventTooLargeError):
        return error
    field = prefix if error.field in (None, "", "message") else f"{prefix}.{error.field}"
    moved = type(error).__new__(type(error))
    moved.__dict__.update(error.__dict__)
    moved.field = field
    moved.args = (f"{field}: {error.reason}",)
    return moved
