"""The Responses API's rules, for both sides: what a payload's items may be (the append side's
refusal :data:`CODES`, :func:`check_pairing`) and what a rendered ``input`` must satisfy
(:func:`violations`; the renderer, events/formats/responses/render.py, must never produce a
breach, and tests run it on every fragment they render). The roles a user-side message may
have are stated once, in :data:`USER_SIDE_ROLES`, for both."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from events.errors import NativeFormatError
from events.event_types import Role

__all__ = ["CODES", "USER_SIDE_ROLES", "check_pairing", "refuse", "violations"]

CODES: Final[Mapping[str, str]] = {
    "invalid_payload": "the payload is not a Response object, an item or a list of items",
    "not_json": "the payload holds a value JSON cannot carry (NaN, Infinity, a non-JSON type)",
    "empty_payload": "no items (an empty list, a Response without output)",
    "invalid_item": "an item is not a JSON object, its type is not a string, or a known key has the wrong type",
    "missing_type": "an item has neither a type nor a role",
    "unknown_role": "a message's role is not user, system, developer or assistant",
    "invalid_content": "a message's content is neither a string nor a list of parts",
    "invalid_part": "a content part is not an object, or its type, text or another known key has the wrong type",
    "reasoning_without_summary": "a reasoning item has no summary list (required even if empty)",
    "reasoning_without_id": "a reasoning item has no id (rs_…)",
    "invalid_summary": "a reasoning summary is not a list of summary_text objects",
    "function_call_without_call_id": "a function_call has no call_id",
    "function_call_without_name": "a function_call has no name",
    "arguments_not_string": "a function_call's arguments are not a string",
    "arguments_not_json": "a completed function_call's arguments are not strict JSON text",
    "duplicate_call_id": "two function_call items of the payload share a call_id",
    "function_call_output_without_call_id": "a function_call_output has no call_id",
    "function_call_output_before_call": "a function_call_output comes before its function_call",
    "duplicate_call_output": "two function_call_output items of the payload answer one call_id",
    "invalid_output": "a function_call_output's output is neither a string nor a list of parts",
    "invalid_response": "a Response object's output is not a list, or its id, model or status is not a string",
    "invalid_usage": "a Response's usage counts are not non-negative integers",
}

USER_SIDE_ROLES: Final[Mapping[str, Role]] = {"user": "user", "system": "system", "developer": "system"}
"""A user-side message's roles, each with the neutral role it is stored as (a developer
message is a system prompt); every other item of a turn is the assistant's."""
_MESSAGE_ROLES: Final = frozenset({*USER_SIDE_ROLES, "assistant"})


def refuse(message: str, field: str, code: str) -> NativeFormatError:
    assert code in CODES  # a new code must be documented in CODES
    return NativeFormatError(message, field=field or None, code=code)


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def check_pairing(items: Sequence[Any], paths: Sequence[str]) -> None:
    """Call ids: present, unique per payload, every output after its call. An output whose call
    is not in the payload is fine here (the call can be in an earlier append)."""
    first_call: dict[str, int] = {}
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise refuse("an item must be a JSON object", paths[i], "invalid_item")
        if item.get("type") == "function_call":
            call_id = item.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise refuse(
                    "a function_call needs a call_id", _at(paths[i], "call_id"), "function_call_without_call_id"
                )
            if call_id in first_call:
                raise refuse(f"call_id {call_id!r} is used twice", _at(paths[i], "call_id"), "duplicate_call_id")
            first_call[call_id] = i
    answered: set[str] = set()
    for i, item in enumerate(items):
        if item.get("type") != "function_call_output":
            continue
        call_id = item.get("call_id")
        field = _at(paths[i], "call_id")
        if not isinstance(call_id, str) or not call_id:
            raise refuse("a function_call_output needs a call_id", field, "function_call_output_without_call_id")
        if first_call.get(call_id, -1) > i:
            raise refuse(
                f"the output of {call_id!r} comes before its function_call", field, "function_call_output_before_call"
            )
        if call_id in answered:
            raise refuse(f"call_id {call_id!r} is answered twice", field, "duplicate_call_output")
        answered.add(call_id)


_ASSISTANT_PARTS: Final = frozenset({"output_text", "refusal"})
_INPUT_PARTS: Final = frozenset({"input_text", "input_image", "input_file"})


def violations(fragment: Mapping[str, Any]) -> list[str]:
    """Every breach of the Responses API's rules in a rendered fragment (empty: valid)."""
    out: list[str] = [f"unexpected key {k!r}" for k in fragment if k not in ("instructions", "input")]
    if "instructions" in fragment and not isinstance(fragment["instructions"], str):
        out.append("instructions must be a string")
    items = fragment.get("input")
    if not isinstance(items, list):
        return [*out, "input must be a list of items"]
    calls: dict[str, int] = {}  # call_id -> index of its function_call
    answered: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            out.append(f"input[{i}]: not an object")
            continue
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            out.extend(_message_violations(i, item))
            if item.get("role") in USER_SIDE_ROLES:  # reasoning models need every call answered first
                out.extend(
                    f"input[{i}]: call {c!r} unanswered before a {item['role']} message"
                    for c in calls
                    if c not in answered
                )
        elif kind == "function_call":
            out.extend(_call_violations(i, item, calls))
        elif kind == "function_call_output":
            out.extend(_output_violations(i, item, calls, answered))
        elif kind == "reasoning":
            out.extend(_reasoning_violations(i, item, items[i + 1 :]))
        elif not isinstance(kind, str):
            out.append(f"input[{i}]: item without a type")
    out.extend(f"call {c!r} (input[{calls[c]}]) never answered" for c in calls if c not in answered)
    return out


def _call_violations(i: int, item: Mapping[str, Any], calls: dict[str, int]) -> list[str]:
    out = []
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        out.append(f"input[{i}]: function_call without call_id")
    elif call_id in calls:
        out.append(f"input[{i}]: call_id {call_id!r} used twice")
    else:
        calls[call_id] = i
    if not isinstance(item.get("name"), str) or not isinstance(item.get("arguments"), str):
        out.append(f"input[{i}]: function_call needs a string name and arguments")
    return out


def _output_violations(i: int, item: Mapping[str, Any], calls: Mapping[str, int], answered: set[str]) -> list[str]:
    out = []
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or call_id not in calls:
        out.append(f"input[{i}]: function_call_output {call_id!r} without an earlier function_call")
    elif call_id in answered:
        out.append(f"input[{i}]: call {call_id!r} answered twice")
    else:
        answered.add(call_id)
    if not isinstance(item.get("output"), str | list):
        out.append(f"input[{i}]: output must be a string or a list of parts")
    return out


def _message_violations(i: int, item: Mapping[str, Any]) -> list[str]:
    role, content = item.get("role"), item.get("content")
    if role not in _MESSAGE_ROLES:
        return [f"input[{i}]: unknown role {role!r}"]
    if isinstance(content, str):
        return []
    if not isinstance(content, list):
        return [f"input[{i}]: content must be a string or a list of parts"]
    wrong = _INPUT_PARTS if role == "assistant" else _ASSISTANT_PARTS
    return [
        f"input[{i}].content[{j}]: a {role} message takes no {p.get('type')!r} part"
        for j, p in enumerate(content)
        if not isinstance(p, Mapping) or p.get("type") in wrong
    ]


def _reasoning_violations(i: int, item: Mapping[str, Any], rest: Sequence[Any]) -> list[str]:
    out = []
    if not isinstance(item.get("summary"), list):
        out.append(f"input[{i}]: reasoning item without a summary list")
    if not isinstance(item.get("id"), str):
        out.append(f"input[{i}]: reasoning item without an id")
    following = next((x for x in rest if not (isinstance(x, Mapping) and x.get("type") == "reasoning")), None)
    if following is None or not isinstance(following, Mapping):
        out.append(f"input[{i}]: reasoning item not followed by the item it belongs to")
    elif following.get("type") == "function_call_output" or following.get("role") in USER_SIDE_ROLES:
        out.append(
            f"input[{i}]: reasoning item followed by {following.get('role') or following.get('type')!r}, "
            "not by an item of its own turn"
        )
    return out
