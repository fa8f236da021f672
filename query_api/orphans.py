"""Tool results that answer no call, found before a native payload is appended.

A payload's tool message must answer a call that is open when it is applied: one made earlier
in the same payload, or — for the results before the payload's first user or assistant message
— one of the conversation's open calls (:meth:`~query_api.ports.ReadModels.open_tool_calls`).
The walk is the projection's own (projectors.state): an assistant message's calls replace the
open ones (none for an interrupted stream), a user message closes them, an answer closes its
call. Pure; the HTTP route reads the open calls, waiting for the projection when it must.

Chat Completions bodies are not checked: a stray tool message there is stored, flagged by the
projection and never served, as it always was (``orphan_tool_result`` is for native formats).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from events.event_types import MessageAppended
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
    open_calls = set(conversation_calls)
    for i, m in enumerate(messages):
        if m.role == "tool":
            if m.tool_call_id not in open_calls:
                return i
            open_calls.discard(m.tool_call_id)
        elif m.role == "assistant":
            open_calls = set() if m.finish_reason == "interrupted" else {c.id for c in m.tool_calls}
        elif starts_turn(m.role):
            open_calls = set()
    return None
