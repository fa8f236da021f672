"""The open-tool-calls walk: which calls a tool message may answer next.

An assistant message's calls replace the open ones (none for an interrupted stream:
:func:`~events.event_types.tool_calls_ran`), a user message closes them, an answer closes its
call. Pure; the fold (projectors/state.py) flags a tool message that answers no open call, and
the append route refuses a native payload's (query_api/orphans.py) — both by this one walk.
"""

from __future__ import annotations

from events.event_types import MessageAppended, tool_calls_ran
from projectors.turns import starts_turn

__all__ = ["FLAG_DUPLICATE_TOOL_RESULT", "FLAG_UNKNOWN_TOOL_CALL", "after_message"]

# Why a stored message is kept for audit but never served.
FLAG_UNKNOWN_TOOL_CALL = "unknown_tool_call"  # answers a call id the conversation has not open
FLAG_DUPLICATE_TOOL_RESULT = "duplicate_tool_result"  # a second answer to the same call

Calls = tuple[str, ...]


def after_message(open_calls: Calls, answered: Calls, msg: MessageAppended) -> tuple[Calls, Calls, str | None]:
    """The open calls and those of the same assistant message already answered once ``msg`` is
    applied, and for a tool message that answers none of the open calls, why (a flag)."""
    role = msg.role
    if role == "tool":
        call_id = msg.tool_call_id or ""
        if call_id in open_calls:
            return tuple(c for c in open_calls if c != call_id), (*answered, call_id), None
        return open_calls, answered, FLAG_DUPLICATE_TOOL_RESULT if call_id in answered else FLAG_UNKNOWN_TOOL_CALL
    if role == "assistant":
        return (tuple(c.id for c in msg.tool_calls) if tool_calls_ran(msg.finish_reason) else ()), (), None
    if starts_turn(role):
        return (), (), None
    return open_calls, answered, None
