"""Provider formats on the append side: a provider's native payload to neutral messages.

One module per format (``anthropic``, ``responses``, ``gemini``), each a pure ``parse``
function with the :class:`Parser` signature. ``events.openai_format`` is the Chat Completions
one (it predates the others). A payload that breaks its format raises
:class:`~events.errors.NativeFormatError` with a stable ``code`` and the JSON path; unknown
*block types* inside a valid message are kept as :class:`~events.blocks.OpaqueBlock`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from events.event_types import MessageAppended

__all__ = ["Parsed", "Parser"]


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
