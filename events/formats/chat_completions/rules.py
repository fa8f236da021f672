"""The valid-context rules, as a checker every served context passes through.

1. System messages come first (then the summary, itself a system message).
2. The first other message is a user message.
3. Every tool call is followed by exactly its results, before any other message; no call id
   repeats; a context never ends with a call unanswered.
4. Only the fields Chat Completions accepts for the role; ``reasoning_content`` only as the
   reasoning policy (``omit`` | ``tool_turns`` | ``all``) allows.
5. The context fits ``budget_tokens - reserve_tokens - tools_tokens`` (the assembler's sum,
   not checked here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SERVED_FIELDS = {
    "system": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "reasoning_content"},
    "tool": {"role", "content", "tool_call_id"},
}


def violations(messages: Sequence[Mapping[str, Any]], *, reasoning: str = "omit") -> list[str]:
    """Every rule 1-4 breach in ``messages`` (rule 5, the budget, is the assembler's sum)."""
    found: list[str] = []
    roles = [m.get("role") for m in messages]
    first_other = next((i for i, r in enumerate(roles) if r != "system"), len(roles))
    if any(r == "system" for r in roles[first_other:]):
        found.append("rule 1: a system message after a non-system message")
    if first_other < len(roles) and roles[first_other] != "user":
        found.append(f"rule 2: the first non-system message is {roles[first_other]!r}, not 'user'")
    open_calls: list[str] = []
    for i, m in enumerate(messages):
        role = m.get("role")
        extra = set(m) - SERVED_FIELDS.get(str(role), set())
        if extra:
            found.append(f"rule 4: message {i} ({role}) carries {sorted(extra)}")
        if "reasoning_content" in m and reasoning == "omit":
            found.append(f"rule 4: message {i} carries reasoning_content under policy 'omit'")
        if role == "tool":
            call_id = m.get("tool_call_id")
            if call_id not in open_calls:
                found.append(f"rule 3: tool message {i} answers {call_id!r}, which no open tool call has")
            else:
                open_calls.remove(call_id)
            continue
        if open_calls:
            found.append(f"rule 3: message {i} ({role}) comes before the results of {open_calls}")
            open_calls = []
        if role == "assistant" and m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            if len(set(ids)) != len(ids):
                found.append(f"rule 3: message {i} repeats a tool call id")
            open_calls = list(ids)
    if open_calls:
        found.append(f"rule 3: the context ends before the results of {open_calls}")
    return found
