"""What every format's renderer can carry: one limit, checked where a message enters the log and
again where it is served (query_api/context.py), so a stored message is servable in every format.

Nesting. Renderers turn a message's JSON texts into objects of the context's body: tool-call
arguments become Anthropic's ``input`` and Gemini's ``args``, native extras and opaque blocks
their provider's keys, a Gemini function response its ``response`` object. The body is encoded
by orjson, which refuses more than 254 levels (and the standard library's encoder, its fallback,
overflows the stack near 1000), so JSON nested too deep in any of them made every later context
of its conversation a 500. The producer contract: a payload, and every JSON text of a message,
nests at most :data:`MAX_NESTING` arrays and objects deep — a body wrapping one (a few levels)
stays far below orjson's limit. Deeper is refused at the edge (422 ``nested_too_deep`` with the
path of the first value past the limit); a message stored deeper before (by an older convlog, or
a producer that bypassed this one) is left out of the contexts it would break and listed in their
``dropped`` (reason ``unservable``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from events.errors import InvalidEventError
from events.event_types import Block, MessageAppended, OpaqueBlock, TextBlock, ToolCallBlock
from events.strict_json import NotJsonError, parse_json

__all__ = ["MAX_NESTING", "RESPONSE_MARK", "check_nesting", "check_servable", "nesting_path", "too_deep_field"]

MAX_NESTING: Final = 64
"""Arrays and objects a payload, or a JSON text of a message, may nest (the value itself is 1)."""

RESPONSE_MARK: Final = "$response"
"""The key, in a text block's ``extra``, saying its text is the JSON of a Gemini function
response, served as that object (events/formats/gemini/parse.py)."""


def nesting_path(value: object, limit: int = MAX_NESTING) -> list[str | int] | None:
    """The path of the first array or object of ``value`` nested deeper than ``limit`` (``[]`` is
    ``value`` itself), or None. Iterative: a value of any depth is looked at without recursion."""
    stack: list[tuple[object, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, dict):
            children: Iterable[tuple[str | int, object]] = node.items()
        elif isinstance(node, list | tuple):
            children = enumerate(node)
        else:
            continue
        if depth > limit:
            return list(path)
        stack.extend((child, depth + 1, (*path, k)) for k, child in reversed(list(children)))
    return None


def _dotted(prefix: str, path: Sequence[str | int]) -> str:
    out = prefix
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _too_deep(field: str | None) -> InvalidEventError:
    error = InvalidEventError(
        f"nested more than {MAX_NESTING} arrays and objects deep (the limit every format's context can carry)",
        field=field or None,
    )
    error.code = "nested_too_deep"
    return error


def check_nesting(value: object, field: str = "") -> None:
    """:class:`InvalidEventError` (code ``nested_too_deep``) naming the first value of ``value``
    (a parsed payload, at ``field``) nested deeper than :data:`MAX_NESTING`."""
    path = nesting_path(value)
    if path is not None:
        raise _too_deep(_dotted(field, path))


def check_servable(message: MessageAppended) -> None:
    """What the producer adds to the log's own validation (events/validation.py, which the
    projector runs on every record too, so that an old record it accepted stays readable): no
    JSON text of ``message`` nests deeper than :data:`MAX_NESTING`."""
    arguments = () if message.blocks else (c.arguments for c in message.tool_calls)
    field = too_deep_field(message.blocks, arguments)
    if field is not None:
        raise _too_deep(field)


def _text_too_deep(text: object) -> bool:
    if not isinstance(text, str) or text.count("[") + text.count("{") <= MAX_NESTING:
        return False  # the common case, in C: fewer brackets than the limit cannot nest past it
    try:
        return nesting_path(parse_json(text)) is not None
    except NotJsonError:
        return False  # not JSON: no renderer parses it into an object (the validation's concern)


def too_deep_field(blocks: Sequence[Block], arguments: Iterable[Any] = ()) -> str | None:
    """The field of a message's JSON texts that nests deeper than :data:`MAX_NESTING`, if any:
    ``blocks[i].arguments`` / ``.json`` / ``.extra`` / ``.text`` (a function response), or
    ``tool_calls[i].arguments`` for ``arguments``, the texts of a message without blocks."""
    for i, b in enumerate(blocks):  # per served message on every context: no lists built
        if isinstance(b, OpaqueBlock):
            if _text_too_deep(b.json):
                return f"blocks[{i}].json"
            continue
        if b.extra is not None and _text_too_deep(b.extra):
            return f"blocks[{i}].extra"
        if isinstance(b, ToolCallBlock) and _text_too_deep(b.arguments):
            return f"blocks[{i}].arguments"
        if isinstance(b, TextBlock) and b.extra is not None and RESPONSE_MARK in b.extra and _text_too_deep(b.text):
            return f"blocks[{i}].text"
    for i, text in enumerate(arguments):
        if _text_too_deep(text):
            return f"tool_calls[{i}].arguments"
    return None
