"""Stored messages a context cannot carry: left out of it and listed, never a failed context.

Every message is checked where it enters the log against what the renderers can carry
(events/servable.py, the native parsers' schemas), so none should be here. One stored before a
check existed (or by a producer that bypassed convlog's) must not make its conversation
unservable for good: the assembler (query_api/context.py) renders a context as always and, only
when that rendering breaks its format's rules (or a served message nests past
:data:`events.servable.MAX_NESTING`, which the JSON encoder of the body cannot carry), finds the
messages responsible by rendering each unit of the context on its own — a user message, a tool
group (the call and its results), an answer — behind its turn's question; what fails is left out,
like a dead letter, and listed in ``dropped`` with reason ``unservable``. Pure functions.
"""

from __future__ import annotations

from typing import Any

from events.formats.registry import FORMATS, FormatRegistry
from events.formats.rendering import Rendered, RenderRequest, Target
from events.servable import too_deep_field
from query_api.context_types import StoredMessage

__all__ = ["checked_render", "too_deep", "violations"]


def too_deep(message: StoredMessage) -> bool:
    """Whether a JSON text of ``message`` nests past the limit (a renderer would put it in the body)."""
    if not (message.blocks or message.tool_calls):
        return False  # the common message: nothing a renderer parses
    arguments = () if message.blocks else (c["function"]["arguments"] for c in message.tool_calls)
    return too_deep_field(message.blocks, arguments) is not None


def violations(fragment: dict[str, Any], target: Target, *, formats: FormatRegistry = FORMATS) -> list[str]:
    """Every breach of ``target.format``'s rules in ``fragment`` (empty: valid)."""
    return formats.violations(fragment, target)


def checked_render(request: RenderRequest, *, formats: FormatRegistry = FORMATS) -> Rendered | None:
    """The rendering of ``request`` if it is valid in its format, else None: a renderer that
    cannot carry a stored message (an exception of any kind, from a block no parser of today
    stores) is the same finding as a rendering that breaks the rules."""
    try:
        rendered = formats.render(request)
        return None if violations(rendered.fragment, request.target, formats=formats) else rendered
    except _STORED_VALUE_ERRORS:
        return None


# What a stored value a renderer does not expect raises (a key missing, a wrong type, JSON too
# deep for the standard library, a renderer's own assertion about a block); not a code's NameError.
_STORED_VALUE_ERRORS = (ValueError, TypeError, LookupError, AttributeError, RecursionError, AssertionError)
