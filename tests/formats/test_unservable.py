"""A stored message no context can carry is left out of it and listed, never a failed context
(query_api/unservable.py); and the nesting limit every format can carry is refused at the edge
(events/servable.py)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import orjson
import pytest

import query_api.unservable
from events.blocks import TextBlock, native_message
from events.errors import InvalidEventError
from events.event_types import MessageAppended, ToolCall
from events.formats.registry import FORMATS
from events.formats.rendering import Dropped, Target
from events.formats.responses.parse import ITEM_KEY
from events.servable import MAX_NESTING, check_servable
from projectors.tokens import model_spec
from query_api.context import assemble
from query_api.context_types import Context, ContextRequest
from query_api.unservable import violations
from tests.formats.every_format import TARGETS, count, stored, validate_with_sdk


def _nested(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def _context(history: list[MessageAppended], fmt: str, model: str) -> Context:
    messages = [stored(m, i) for i, m in enumerate(history)]
    request = ContextRequest(model, 100_000, format=fmt)  # type: ignore[arg-type]
    ctx = assemble(system=[], summary=None, messages=messages, request=request, spec=model_spec(model), count=count)
    assert violations(ctx.fragment, Target(fmt, model)) == []  # type: ignore[arg-type]
    validate_with_sdk(fmt, ctx.fragment)
    orjson.dumps(ctx.fragment)  # what the API's body encoder does (no RecursionError, no fallback)
    return ctx


def _user(message_id: str, text: str) -> MessageAppended:
    return MessageAppended(message_id=message_id, role="user", content=text)


def _answer(message_id: str, text: str) -> MessageAppended:
    return MessageAppended(message_id=message_id, role="assistant", content=text)


def _untyped_item() -> MessageAppended:
    """A Responses ``{"type": null, "role": "user", "content": "second"}`` as convlog stored it
    before the parser refused a type that is not a string: its item record says ``type: null``."""
    record = {"item": {"type": None, "role": "user", "content": None}, "key": "content", "string": True, "n": 1}
    block = TextBlock("second", extra=json.dumps({ITEM_KEY: record}))
    return native_message(message_id="u2", role="user", blocks=[block], api="responses", provider="openai")


def _served_text(ctx: Context) -> str:
    return json.dumps(ctx.fragment)


@pytest.mark.parametrize(("fmt", "model"), TARGETS)
def test_a_stored_item_the_format_cannot_carry_is_left_out_not_a_failed_context(fmt: str, model: str) -> None:
    """The item renders back as ``{"type": null, ...}`` in format=responses, which its rules refuse:
    that turn is left out and listed (``unservable``), the rest of the conversation is served —
    before, every responses context of the conversation was a 500 (AssertionError)."""
    history = [_user("u1", "first"), _answer("a1", "one"), _untyped_item(), _answer("a2", "two"), _user("u3", "now")]
    ctx = _context(history, fmt, model)
    text = _served_text(ctx)
    assert "first" in text
    assert "now" in text
    if fmt == "responses":
        assert "second" not in text
        assert '"two"' not in text
        assert Dropped("u2", "message", "unservable") in ctx.dropped
        assert Dropped("a2", "message", "unservable") in ctx.dropped  # its turn: an answer without its question
    else:  # the item record is only read by its own format: the others carry the text
        assert "second" in text
        assert not [d for d in ctx.dropped if d.reason == "unservable"]


@pytest.mark.parametrize(("fmt", "model"), TARGETS)
def test_json_stored_nested_past_the_limit_is_left_out_of_every_format(fmt: str, model: str) -> None:
    """Tool-call arguments nested 300 deep (accepted before the limit): the tool group is left out
    of every format's context and listed, and the body stays one orjson encodes — before, the
    Anthropic and Gemini contexts put the parsed arguments in the body, past orjson's 254 levels."""
    deep = json.dumps(_nested(300))
    calls = (ToolCall("call_1", "lookup", deep),)
    history = [
        _user("u1", "first"),
        MessageAppended(message_id="a1", role="assistant", tool_calls=calls),
        MessageAppended(message_id="t1", role="tool", content="found", tool_call_id="call_1"),
        _answer("a2", "done"),
        _user("u2", "now"),
    ]
    ctx = _context(history, fmt, model)
    assert "found" not in _served_text(ctx)
    assert "done" in _served_text(ctx)
    assert {d.message_id for d in ctx.dropped if d.reason == "unservable"} == {"a1", "t1"}


def _gemini_round(n: int) -> list[MessageAppended]:
    """A Gemini question, a call without an id (its neutral id is ``lookup:0`` in every content)
    and its response, as the parser stores them."""
    payload = [
        {"role": "user", "parts": [{"text": f"question {n}"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "lookup", "args": {"n": n}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "lookup", "response": {"n": n}}}]},
    ]
    counter = itertools.count()
    return list(FORMATS.parser_for("gemini")(payload, new_id=lambda: f"r{n}-{next(counter)}").messages)


@pytest.mark.parametrize(("fmt", "model"), TARGETS)
def test_a_call_id_repeated_in_a_conversation_is_served_in_every_format(fmt: str, model: str) -> None:
    """Two Gemini rounds calling the same function: both calls' neutral id is ``lookup:0``, which
    Responses takes once per input — every responses context of such a conversation was a 500.
    The repeat is served as ``lookup:0#2`` with its output; nothing is left out."""
    ctx = _context([*_gemini_round(1), *_gemini_round(2), _user("now", "now")], fmt, model)
    assert [d for d in ctx.dropped if d.reason == "unservable"] == []
    assert "question 2" in _served_text(ctx)
    if fmt == "responses":
        ids = [(i["type"], i["call_id"]) for i in ctx.fragment["input"] if "call_id" in i]
        assert ids == [
            ("function_call", "lookup:0"),
            ("function_call_output", "lookup:0"),
            ("function_call", "lookup:0#2"),
            ("function_call_output", "lookup:0#2"),
        ]


def test_the_limit_leaves_room_for_the_body_around_it() -> None:
    """The deepest accepted value, wrapped as deep as any format's context body wraps it (the
    body, the fragment, the list, the message, its blocks, the block, the input): orjson's 254."""
    body: Any = _nested(MAX_NESTING)
    for _ in range(8):
        body = {"x": [body]}
    orjson.dumps(body)


def _ids() -> Any:
    counter = itertools.count()
    return lambda: f"m{next(counter)}"


@pytest.mark.parametrize(
    ("fmt", "payload", "field"),
    [
        (
            "anthropic",
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": _nested(958)}]},
            "content[0].input",
        ),
        (
            "responses",
            [{"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "x": _nested(100)}],
            "[0].x",
        ),
        (
            "gemini",
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": _nested(961)}}]},
            "parts[0].functionCall.args",
        ),
        ("chat_completions", {"role": "user", "content": "hi", "metadata": _nested(MAX_NESTING)}, "metadata"),
    ],
)
def test_payloads_nested_past_the_limit_are_refused_with_the_path(fmt: str, payload: Any, field: str) -> None:
    """422 ``nested_too_deep`` at the edge, for every format (Gemini raised RecursionError: a 500)."""
    with pytest.raises(InvalidEventError) as info:
        FORMATS.parser_for(fmt)(payload, new_id=_ids())
    assert info.value.code == "nested_too_deep"
    assert info.value.field is not None
    assert info.value.field.startswith(field)


def test_payloads_at_the_limit_are_accepted() -> None:
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": _nested(61)}]}
    parsed = FORMATS.parser_for("anthropic")(call, new_id=_ids())  # 61 + the message, its content list and the block
    check_servable(parsed.messages[0])


def test_units_servable_alone_but_not_together_leave_the_later_turn_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """A breach no unit has alone (none of today's renderers makes one: this is the guard that
    keeps a future one from failing the whole context): unit by unit, the later is left out."""
    real = query_api.unservable.violations

    def together(fragment: dict[str, Any], target: Target, **options: Any) -> list[str]:
        text = json.dumps(fragment)
        return ["a breach of two turns"] if "first" in text and "second" in text else real(fragment, target, **options)

    monkeypatch.setattr(query_api.unservable, "violations", together)
    history = [
        _user("u1", "first"),
        _answer("a1", "one"),
        _user("u2", "second"),
        _answer("a2", "two"),
        _user("u3", "now"),
    ]
    messages = [stored(m, i) for i, m in enumerate(history)]
    request = ContextRequest("gpt-4o", 100_000)
    ctx = assemble(system=[], summary=None, messages=messages, request=request, spec=model_spec("gpt-4o"), count=count)
    assert [m["content"] for m in ctx.messages] == ["first", "one", "now"]
    assert [d.message_id for d in ctx.dropped if d.reason == "unservable"] == ["u2", "a2"]
