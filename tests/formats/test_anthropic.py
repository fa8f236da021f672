"""The Anthropic Messages format: parse on append, render on serve, and the rule checker.

Every fragment rendered here is checked by ``violations`` and by the anthropic SDK's own
request param types (tests/formats/anthropic_support.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic.types
import pytest

from events.errors import NativeFormatError
from events.event_types import OpaqueBlock, ReasoningBlock, Usage
from events.formats.anthropic.parse import parse
from events.formats.anthropic.render import wire_id
from events.formats.anthropic.rules import violations
from events.formats.rendering import Dropped
from events.strict_json import compact_json
from events.validation import validate_message
from query_api.context_types import StoredMessage
from tests.formats.anthropic_support import ids, native_messages, parse_all, render_checked, stored

FIXTURES = Path(__file__).parent.parent / "fixtures" / "formats" / "anthropic"
DOC_EXAMPLES = sorted(p.stem for p in FIXTURES.glob("*.json"))


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return doc


def stored_all(payloads: list[Any]) -> list[StoredMessage]:
    return [stored(m, seq) for seq, m in enumerate(parse_all(payloads), 1)]


@pytest.mark.parametrize("name", DOC_EXAMPLES)
def test_doc_examples_round_trip(name: str) -> None:
    doc = load(name)
    parsed = parse_all(doc["payloads"])
    for m in parsed:
        validate_message(m)  # what the producer checks before anything enters the log
    rendered = render_checked([stored(m, i) for i, m in enumerate(parsed, 1)], model=doc["model"])
    assert rendered.fragment == {"messages": native_messages(doc["payloads"])}
    assert rendered.dropped == ()
    served = {
        compact_json(b) for m in rendered.fragment["messages"] if isinstance(m["content"], list) for b in m["content"]
    }
    for m in parsed:
        for b in m.blocks:
            if isinstance(b, OpaqueBlock):
                assert b.json in served  # byte-identical


def test_a_message_response_keeps_its_id_model_usage_and_stop_reason() -> None:
    payload = load("parallel_tool_use")["payloads"][1]
    result = parse(payload, new_id=ids())
    assert result.native_id == "msg_01Aq9w938a90dw8q"
    (msg,) = result.messages
    assert (msg.message_id, msg.role, msg.model, msg.finish_reason) == (
        "m1",
        "assistant",
        payload["model"],
        "tool_calls",
    )
    assert msg.metadata == {"anthropic.id": "msg_01Aq9w938a90dw8q", "anthropic.stop_reason": "tool_use"}
    assert msg.usage == Usage(prompt_tokens=472, completion_tokens=122, cached_tokens=0, cache_write_tokens=0)
    assert [c.arguments for c in msg.tool_calls] == [
        '{"location":"San Francisco, CA","unit":"celsius"}',
        '{"location":"New York, NY","unit":"celsius"}',
    ]
    cached = parse(load("extended_thinking_tools")["payloads"][3], new_id=ids()).messages[0]
    assert cached.usage == Usage(
        prompt_tokens=12 + 1435, completion_tokens=20, cached_tokens=1435, cache_write_tokens=0
    )
    assert cached.finish_reason == "stop"


def test_a_user_message_with_tool_results_is_tool_messages_first_then_the_rest() -> None:
    payload = load("parallel_tool_use")["payloads"][2]
    msgs = parse(payload, new_id=ids()).messages
    assert [(m.message_id, m.role, m.tool_call_id) for m in msgs] == [
        ("m1", "tool", "toolu_01A09q90qw90lq917835lq9"),
        ("m2", "tool", "toolu_01B09q90qw90lq917835lq9"),
        ("m3", "user", None),
    ]
    assert [m.content for m in msgs] == [
        "San Francisco: 15°C, partly cloudy",
        "New York: 22°C, sunny",
        "Thanks, and keep it short.",
    ]


def test_sdk_objects_are_dumped_first() -> None:
    doc = load("extended_thinking_tools")["payloads"][1]
    sdk = anthropic.types.Message.model_validate(doc)
    assert parse(sdk, new_id=ids()).messages == parse(doc, new_id=ids()).messages


def test_a_tool_result_for_a_call_of_an_earlier_append_is_accepted() -> None:
    msgs = parse(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "ok"}]}, new_id=ids()
    ).messages
    assert [(m.role, m.tool_call_id) for m in msgs] == [("tool", "toolu_x")]


_TEXT = {"type": "text", "text": "hi"}
_CALL = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
_RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
_THINK = {"type": "thinking", "thinking": "hmm", "signature": "sig"}


@pytest.mark.parametrize(
    ("payload", "code", "field"),
    [
        ({"role": "system", "content": "be nice"}, "unknown_role", "role"),
        ({"role": "tool", "content": "x"}, "unknown_role", "role"),
        ([{"role": "user", "content": "a"}, {"role": "developer", "content": "b"}], "unknown_role", "[1].role"),
        ({"type": "message", "role": "user", "model": "m", "content": [_TEXT]}, "unknown_role", "role"),
        ({"type": "completion", "role": "assistant"}, "invalid_payload", "type"),
        ("hello", "invalid_payload", ""),
        ({"role": "user", "content": []}, "empty_content", "content"),
        ({"role": "user", "content": 3}, "invalid_content", "content"),
        ({"role": "user", "content": ["hi"]}, "invalid_content", "content[0]"),
        ({"role": "assistant", "content": [_TEXT, _RESULT]}, "tool_result_in_assistant", "content[1].type"),
        ({"role": "user", "content": [_TEXT, _RESULT]}, "tool_result_not_first", "content[1]"),
        (
            {"role": "user", "content": [_RESULT, _TEXT, {**_RESULT, "tool_use_id": "t2"}]},
            "tool_result_not_first",
            "content[2]",
        ),
        ({"role": "assistant", "content": [{**_CALL, "input": [1]}]}, "tool_use_input_not_object", "content[0].input"),
        ({"role": "assistant", "content": [{**_CALL, "input": "{}"}]}, "tool_use_input_not_object", "content[0].input"),
        (
            {"role": "assistant", "content": [{**_TEXT, "signature": "s"}]},
            "signature_on_non_thinking_block",
            "content[0].signature",
        ),
        (
            {"role": "assistant", "content": [_THINK, {**_CALL, "signature": "s"}]},
            "signature_on_non_thinking_block",
            "content[1].signature",
        ),
        (
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "t"}]},
            "thinking_without_signature",
            "content[0].signature",
        ),
        ({"role": "assistant", "content": [_CALL, _THINK]}, "thinking_after_tool_use", "content[1]"),
        ({"role": "assistant", "content": [_CALL, _CALL]}, "duplicate_tool_use_id", "content[1].id"),
        (
            [
                {"role": "assistant", "content": [_CALL]},
                {"role": "user", "content": [_RESULT]},
                {"role": "assistant", "content": [_CALL]},
            ],
            "duplicate_tool_use_id",
            "[2].content[0].id",
        ),
        (
            [{"role": "user", "content": [_RESULT]}, {"role": "assistant", "content": [_CALL]}],
            "tool_result_before_tool_use",
            "[0].content[0].tool_use_id",
        ),
        ({"role": "user", "content": [_RESULT, _RESULT]}, "duplicate_tool_result", "content[1].tool_use_id"),
        ({"role": "user", "content": [_CALL]}, "tool_use_in_user", "content[0].type"),
        ({"role": "user", "content": [_THINK]}, "thinking_in_user", "content[0].type"),
        (
            {"role": "user", "content": [{**_RESULT, "content": [_CALL]}]},
            "invalid_tool_result_content",
            "content[0].content[0].type",
        ),
        ({"role": "user", "content": [{**_RESULT, "is_error": "yes"}]}, "invalid_block", "content[0].is_error"),
        ({"role": "assistant", "content": [{"type": "text", "text": None}]}, "invalid_block", "content[0].text"),
    ],
)
def test_a_payload_that_breaks_the_format_is_refused_with_a_code_and_path(payload: Any, code: str, field: str) -> None:
    with pytest.raises(NativeFormatError) as e:
        parse(payload, new_id=ids())
    assert (e.value.code, e.value.field) == (code, field)


def test_unknown_block_types_and_sources_are_opaque_and_verbatim() -> None:
    odd = [
        {"type": "container_upload", "file_id": "file_1", "zz": [1, 2.5, None]},
        {"type": "image", "source": {"type": "file", "file_id": "file_2"}},
    ]
    (msg,) = parse({"role": "user", "content": [*odd, _TEXT]}, new_id=ids()).messages
    assert msg.blocks[:2] == tuple(OpaqueBlock("anthropic", compact_json(b)) for b in odd)


THINKING = load("extended_thinking_tools")


def test_thinking_goes_only_to_the_model_that_made_it() -> None:
    messages = stored_all(THINKING["payloads"])
    same = render_checked(messages, model="claude-sonnet-4-5-20250929")
    assert same.fragment["messages"][1]["content"][0]["type"] == "thinking"
    other = render_checked(messages, model="claude-opus-4-1-20250805")
    assistant = other.fragment["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["tool_use"]  # the tool pair is kept
    assert other.dropped == (Dropped("m2", "reasoning", "other_model"),)
    assert "hmm" not in json.dumps(other.fragment)


def test_thinking_without_a_recorded_model_is_not_served() -> None:
    param = {"role": "assistant", "content": [_THINK, _TEXT]}
    messages = stored_all([{"role": "user", "content": "q"}, param])
    rendered = render_checked(messages, model="claude-sonnet-4-5")
    assert rendered.fragment["messages"][1]["content"] == [_TEXT]
    with_model = stored_all([{"role": "user", "content": "q"}, {**param, "model": "claude-sonnet-4-5"}])
    assert render_checked(with_model, model="claude-sonnet-4-5").fragment["messages"][1] == param


def cc(seq: int, role: str, content: Any = None, **kw: Any) -> StoredMessage:
    return StoredMessage(seq=seq, epoch=0, message_id=f"c{seq}", role=role, content=content, **kw)


def _call(call_id: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": arguments}}


def test_chat_completions_messages_are_served_in_anthropic_shape() -> None:
    pixel = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
    messages = [
        cc(
            1,
            "user",
            [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{pixel}", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg", "detail": "auto"}},
            ],
        ),
        cc(
            2,
            "assistant",
            None,
            reasoning_content="private",
            tool_calls=(_call("call.1", '{"q":1}'), _call("c2", "[1]")),
        ),
        cc(3, "tool", "one", tool_call_id="call.1"),
        cc(4, "tool", "", tool_call_id="c2"),
        cc(5, "assistant", "done"),
    ]
    rendered = render_checked(messages, model="claude-sonnet-4-5", system=[cc(0, "system", "Be brief.")])
    safe = wire_id("call.1")
    assert safe != "call.1"
    assert rendered.fragment == {
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": pixel}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": safe, "name": "lookup", "input": {"q": 1}},
                    {"type": "tool_use", "id": "c2", "name": "lookup", "input": {"value": [1]}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": safe, "content": "one"},
                    {"type": "tool_result", "tool_use_id": "c2"},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        ],
    }
    assert "private" not in json.dumps(rendered.fragment)


def test_consecutive_same_role_messages_merge_with_results_first() -> None:
    messages = [
        cc(1, "user", "a"),
        cc(2, "user", "b"),
        cc(3, "assistant", "c", tool_calls=(_call("t1", "{}"),)),
        cc(4, "tool", "r", tool_call_id="t1"),
        cc(5, "user", "next"),
    ]
    rendered = render_checked(messages, model="claude-sonnet-4-5")
    assert rendered.fragment["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "c"}, {"type": "tool_use", "id": "t1", "name": "lookup", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r"}, {"type": "text", "text": "next"}],
        },
    ]


def test_images_beyond_image_turns_become_a_placeholder() -> None:
    messages = stored_all(load("citations")["payloads"])
    rendered = render_checked(messages, model="claude-sonnet-4-5-20250929", keep_images=False)
    last = rendered.fragment["messages"][-1]["content"]
    assert [b["type"] for b in last] == ["text", "text", "document", "text"]
    assert last[0] == {"type": "text", "text": "[image omitted]"}


def test_cache_breakpoints_end_of_system_summary_and_last_stable_message() -> None:
    doc = load("parallel_tool_use")
    messages = stored_all([*doc["payloads"], {"role": "user", "content": "And tomorrow?"}])
    system = [cc(0, "system", "You are a weather bot."), cc(0, "system", "Use celsius.")]
    plain = render_checked(messages, model=doc["model"], system=system, summary="Summary: earlier chat.")
    cached = render_checked(messages, model=doc["model"], system=system, summary="Summary: earlier chat.", cache=True)
    frag = cached.fragment
    assert [b.get("cache_control") for b in frag["system"]] == [None, {"type": "ephemeral"}, {"type": "ephemeral"}]
    marked = [
        (i, j)
        for i, m in enumerate(frag["messages"])
        if isinstance(m["content"], list)
        for j, b in enumerate(m["content"])
        if "cache_control" in b
    ]
    assert marked == [(len(frag["messages"]) - 2, 0)]  # the answer before the current user message
    assert _without_cache_control(frag) == plain.fragment


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def test_stored_cache_control_is_not_served_and_breakpoints_never_exceed_four() -> None:
    mark = {"cache_control": {"type": "ephemeral"}}
    opaque = [{"type": "search_result", "source": "s", "title": "t", "content": [_TEXT], **mark} for _ in range(3)]
    payloads = [
        {"role": "user", "content": [{**_TEXT, **mark}, *opaque]},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "b"},
    ]
    rendered = render_checked(stored_all(payloads), model="m", system=[cc(0, "system", "s")], summary="sum", cache=True)
    assert "cache_control" not in rendered.fragment["messages"][0]["content"][0]
    assert json.dumps(rendered.fragment).count("cache_control") == 4


def test_violations_name_each_broken_rule() -> None:
    call = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}
    cases = {
        "only user and assistant": {"messages": [{"role": "system", "content": "x"}]},
        "first message is not a user": {"messages": [{"role": "assistant", "content": "x"}]},
        "roles alternate": {"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]},
        "not all first": {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [call]},
                {"role": "user", "content": [_TEXT, result]},
            ]
        },
        "never answered": {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": [call]}]},
        "answers no tool_use": {"messages": [{"role": "user", "content": [result]}]},
        "without its signature": {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "thinking", "text": "t"}]},
            ]
        },
        "thinking after a tool_use": {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [call, _THINK]},
                {"role": "user", "content": [result]},
            ]
        },
        "breakpoints": {"messages": [{"role": "user", "content": [{**_TEXT, "cache_control": {}} for _ in range(5)]}]},
        "signature on a text": {"messages": [{"role": "user", "content": [{**_TEXT, "signature": "s"}]}]},
    }
    for expected, fragment in cases.items():
        found = violations(fragment)
        assert any(expected in v for v in found), (expected, found)


def test_what_anthropic_cannot_take_is_reported_and_the_turn_stays_valid() -> None:
    gemini_only = StoredMessage(
        seq=1,
        epoch=0,
        message_id="g1",
        role="user",
        content=None,
        api="gemini",
        blocks=(OpaqueBlock("gemini", '{"executableCode":{"code":"1"}}'),),
    )
    thought = StoredMessage(
        seq=2,
        epoch=0,
        message_id="g2",
        role="assistant",
        content=None,
        api="gemini",
        model="gemini-2.5-pro",
        blocks=(ReasoningBlock(text="secret", signature="s"),),
    )
    svg = cc(
        3, "user", [{"type": "image_url", "image_url": {"url": "data:image/svg+xml;base64,PHN2Zz4=", "detail": "auto"}}]
    )
    rendered = render_checked([gemini_only, thought, svg, cc(4, "assistant", "ok")], model="claude-sonnet-4-5")
    assert rendered.fragment["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "[content omitted]"}, {"type": "text", "text": "[file omitted]"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
    ]
    assert rendered.dropped == (
        Dropped("g1", "opaque", "unsupported"),
        Dropped("g2", "reasoning", "other_provider"),
        Dropped("c3", "media", "unsupported"),
    )


def test_not_json_values_are_refused() -> None:
    with pytest.raises(NativeFormatError) as e:
        parse({"role": "assistant", "content": [{**_CALL, "input": {"x": float("nan")}}]}, new_id=ids())
    assert (e.value.code, e.value.field) == ("not_json", "content[0].input")


def test_a_string_content_takes_its_breakpoint_as_a_block() -> None:
    payloads = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "b"},
    ]
    rendered = render_checked(stored_all(payloads), model="m", cache=True)
    assert rendered.fragment["messages"] == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}]},
        {"role": "user", "content": "b"},
    ]
