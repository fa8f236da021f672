"""Tool results that answer no call, found before a native payload is appended.

A payload's tool message must answer a call that is open when it is applied: one made earlier
in the same payload, or — for the results before the payload's first user or assistant message
— one of the conversation's open calls (:meth:`~query_api.ports.ReadModels.open_tool_calls`).
The walk is the projection's own (:func:`projectors.tool_calls.after_message`): an assistant
message's calls replace the open ones (none for an interrupted stream), a user message closes
them, an answer closes its call. Pure; the HTTP route reads the open calls, waiting for the projection when it must.

Chat Completions bodies are not checked: a stray tool message there is stored, flagged by the
projection and never served, as it always was (``orphan_tool_result`` is for native formats).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from events.event_types import MessageAppended
from projectors.tool_calls import after_message
from projectors.turns import starts_turn

__all__ = ["first_orphan", "needs_conversation_calls"]


def needs_conversation_calls(messages: Sequence[MessageAppended]) -> tuple[str, ...]:
    """The call ids the payload's leading tool messages answer (before its first user or
    assistant message): only those can answer the conversation's open calls."""
    leading = []
    for m in messages:
        if m.role == "tool":
            leading.append(m.tool_call_id or "")
        elif m.role == "assistant" or starts_turn(m.role):
            break
    return tuple(leading)


def first_orphan(messages: Sequence[MessageAppended], conversation_calls: Collection[str]) -> int | None:
    """The index of the first tool message answering no open call, given the conversation's
    open calls; None when every result has its call."""
    open_calls: tuple[str, ...] = tuple(conversation_calls)
    answered: tuple[str, ...] = ()
    for i, m in enumerate(messages):
        open_calls, answered, unanswered = after_message(open_calls, answered, m)
        if unanswered is not None:
            return i
    return None
