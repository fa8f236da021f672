"""Mistral's rules, for both sides: a tool call id is 9 letters or digits (the parser refuses
another, the renderer makes one from another format's id), roles are system/user/assistant/tool,
and every tool call is answered by the tool messages right after it."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

CALL_ID = re.compile(r"^[A-Za-z0-9]{9}$")
ROLES = ("system", "user", "assistant", "tool")


def wire_id(call_id: str) -> str:
    """``call_id`` if Mistral takes it, else 9 hex digits derived from it."""
    return call_id if CALL_ID.match(call_id) else hashlib.sha256(call_id.encode()).hexdigest()[:9]


def violations(fragment: Mapping[str, Any]) -> list[str]:
    out = [f"unexpected key {key!r}" for key in fragment if key != "messages"]
    open_calls: list[str] = []
    for i, message in enumerate(fragment.get("messages", [])):
        role = message.get("role")
        if role not in ROLES:
            out.append(f"messages[{i}]: role {role!r}")
        ids = [call["id"] for call in message.get("tool_calls") or ()]
        out.extend(f"messages[{i}]: tool call id {c!r} is not 9 letters or digits" for c in ids if not CALL_ID.match(c))
        if role == "tool":
            if message.get("tool_call_id") not in open_calls:
                out.append(f"messages[{i}]: answers no open tool call")
            else:
                open_calls.remove(message["tool_call_id"])
            continue
        if open_calls:
            out.append(f"messages[{i}]: comes before the results of {open_calls}")
        open_calls = ids
    if open_calls:
        out.append(f"the context ends before the results of {open_calls}")
    return out
