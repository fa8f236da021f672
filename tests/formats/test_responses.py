"""The OpenAI Responses format: append a Response / items, serve ``{"instructions", "input"}``.

Round trips use payloads hand-written after developers.openai.com (tests/fixtures/formats/
responses/, each says which guide), every rendered fragment goes through the rule checker and
the ``openai`` SDK's own ``ResponseInputParam`` (tests/formats/responses_support.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai.types.responses import Response, ResponseFunctionToolCall

from events.blocks import OpaqueBlock, ReasoningBlock, TextBlock, ToolCallBlock, native_message
from events.errors import NativeFormatError
from events.event_types import ImagePart, MessageAppended, TextPart, ToolCall, Usage
from events.formats.registry import FORMATS
from events.formats.rendering import Dropped, RenderRequest, Selected, Target
from events.formats.responses.parse import parse
from events.formats.responses.render import render
from events.formats.responses.rules import CODES, violations
from tests.formats.responses_support import RESPONSES, checked, parse_items, serve, stored

FIXTURES = Path(__file__).parent.parent / "fixtures" / "formats" / "responses"
USER_SIDE = ("system", "developer")


def fixture(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    return doc


@pytest.mark.parametrize("name", ["reasoning_function_calls", "commentary_and_web_search", "user_parts_and_refusal"])
def test_doc_examples_come_back_as_the_same_items(name: str) -> None:
    doc = fixture(name)
    rendered = serve(parse_items(doc["items"]))
    assert rendered.fragment["input"] == [i for i in doc["items"] if i.get("role") not in USER_SIDE]
    assert rendered.fragment.get("instructions") == doc["instructions"]
    assert rendered.dropped == ()


def test_a_response_object_is_one_assistant_message_and_its_three_items_come_back() -> None:
    response = fixture("response_parallel_calls")["response"]
    counter = iter(["m1", "m2"])
    parsed = parse(response, new_id=lambda: next(counter))
    assert parsed.native_id == response["id"]
    (message,) = parsed.messages
    assert message.role == "assistant"
    assert message.model == "gpt-5-2025-08-07"
    assert message.finish_reason == "tool_calls"
    assert message.usage == Usage(
        prompt_tokens=81, completion_tokens=222, cached_tokens=0, reasoning_tokens=192, cache_write_tokens=0
    )
    assert message.metadata == {"openai.response_id": response["id"]}
    assert [c.id for c in message.tool_calls] == ["call_FkaJ0eC3eVYzqYi0jZTRCRwB", "call_Kq9G3mQx7tWb2LrA8pZs1NcE"]
    outputs = [
        native_message(message_id=f"t{i}", role="tool", tool_call_id=c.id, api="responses", blocks=[TextBlock("sunny")])
        for i, c in enumerate(message.tool_calls)
    ]
    rendered = serve([parse_items({"role": "user", "content": "weather?"})[0], message, *outputs])
    assert rendered.fragment["input"][1:4] == response["output"]
    reasoning = rendered.fragment["input"][1]
    assert reasoning["summary"] == []
    # byte-identical, not just equal: the blob is the provider's
    assert json.dumps(reasoning["encrypted_content"]) == json.dumps(response["output"][0]["encrypted_content"])


def test_the_sdk_response_object_parses_as_its_json() -> None:
    doc = fixture("response_parallel_calls")["response"]
    sdk = Response.model_validate({**doc, "tool_choice": "auto", "tools": []})
    assert parse_items(sdk) == parse_items(doc)


def test_an_sdk_object_is_dumped_and_an_output_without_its_call_in_the_payload_is_accepted() -> None:
    call = ResponseFunctionToolCall(type="function_call", id="fc_1", call_id="call_1", name="f", arguments="{}")
    (assistant,) = parse_items(call)
    assert assistant.tool_calls == (ToolCall("call_1", "f", "{}"),)
    (tool,) = parse_items(
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"}
    )  # call appended earlier
    assert (tool.role, tool.tool_call_id, tool.content) == ("tool", "call_1", "ok")


def test_developer_is_a_system_message_served_as_instructions_before_the_summary() -> None:
    system, user = parse_items([{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    assert (system.role, system.content, user.role) == ("system", "Be brief.", "user")
    rendered = serve([system, user], summary="Summary of earlier turns: none")
    assert rendered.fragment == {
        "instructions": "Be brief.\n\nSummary of earlier turns: none",
        "input": [{"role": "user", "content": "hi"}],
    }


def test_finish_reasons() -> None:
    def finish(**fields: Any) -> str | None:
        output = fields.pop("output", [{"type": "message", "role": "assistant", "content": "x"}])
        return parse_items({"object": "response", "output": output, **fields})[0].finish_reason

    refusal = [{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}]
    assert finish(status="completed") == "stop"
    assert finish(status="completed", output=refusal) == "content_filter"
    assert finish(status="incomplete", incomplete_details={"reason": "max_output_tokens"}) == "length"
    assert finish(status="incomplete", incomplete_details={"reason": "content_filter"}) == "content_filter"
    assert finish(status="cancelled") == "interrupted"


CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
OUTPUT = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
USER = {"role": "user", "content": "hi"}


@pytest.mark.parametrize(
    ("payload", "code", "field"),
    [
        ("hello", "invalid_payload", None),
        ([USER, {"type": "x_call", "score": float("nan")}], "not_json", None),
        ([], "empty_payload", None),
        ([USER, 3], "invalid_item", "[1]"),
        ([{"content": "x"}], "missing_type", "[0].type"),
        ([{"role": "robot", "content": "x"}], "unknown_role", "[0].role"),
        ({"role": "user", "content": 5}, "invalid_content", "content"),
        ({"role": "user", "content": [{"type": "input_text", "text": 5}]}, "invalid_part", "content[0].text"),
        ({"type": "reasoning", "id": "rs_1"}, "reasoning_without_summary", "summary"),
        ({"type": "reasoning", "summary": []}, "reasoning_without_id", "id"),
        ({"type": "reasoning", "id": "rs_1", "summary": "x"}, "invalid_summary", "summary"),
        ({**CALL, "call_id": None}, "function_call_without_call_id", "call_id"),
        ({**CALL, "name": ""}, "function_call_without_name", "name"),
        ({**CALL, "arguments": {"a": 1}}, "arguments_not_string", "arguments"),
        ({**CALL, "arguments": '{"a": NaN}'}, "arguments_not_json", "arguments"),
        ([CALL, OUTPUT, CALL], "duplicate_call_id", "[2].call_id"),
        ([{**OUTPUT, "call_id": 7}], "function_call_output_without_call_id", "[0].call_id"),
        ([OUTPUT, CALL], "function_call_output_before_call", "[0].call_id"),
        ([CALL, OUTPUT, OUTPUT], "duplicate_call_output", "[2].call_id"),
        ([CALL, {**OUTPUT, "output": {"x": 1}}], "invalid_output", "[1].output"),
        ({"object": "response", "output": {}}, "invalid_response", "output"),
        (
            {"object": "response", "output": [CALL], "usage": {"input_tokens": -1}},
            "invalid_usage",
            "usage.input_tokens",
        ),
        ({"object": "response", "output": [CALL, {"role": "bot"}]}, "unknown_role", "output[1].role"),
    ],
)
def test_a_payload_that_breaks_the_format_is_refused_with_its_code_and_path(
    payload: object, code: str, field: str | None
) -> None:
    with pytest.raises(NativeFormatError) as caught:
        parse_items(payload)
    assert (caught.value.code, caught.value.field) == (code, field)
    assert code in CODES


def test_unknown_items_and_parts_are_opaque_and_verbatim() -> None:
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": "  spaced\u00e9 "}
    part = {"type": "input_audio", "input_audio": {"data": "AAA=", "format": "wav"}}
    user, assistant = parse_items([{"role": "user", "content": [{"type": "input_text", "text": "a"}, part]}, item])
    assert user.blocks[1] == OpaqueBlock("responses", json.dumps(part, separators=(",", ":")))
    assert assistant.blocks == (OpaqueBlock("responses", json.dumps(item, separators=(",", ":"), ensure_ascii=False)),)


def test_a_reasoning_item_whose_call_is_not_served_is_dropped_with_it() -> None:
    items = [
        USER,
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {**CALL, "call_id": "a"},
        {"type": "reasoning", "id": "rs_2", "summary": []},
        {**CALL, "call_id": "b"},
        {**OUTPUT, "call_id": "a"},
    ]
    user, assistant, tool = (stored(m, i) for i, m in enumerate(parse_items(items)))
    request = RenderRequest(
        system=(),
        summary=None,
        target=RESPONSES,
        messages=(Selected(user), Selected(assistant, call_ids=("a",)), Selected(tool)),
    )
    rendered = checked(render(request))
    assert [i.get("id") or i.get("call_id") for i in rendered.fragment["input"]] == [None, "rs_1", "a", "a"]
    assert rendered.dropped == (Dropped(assistant.message_id, "reasoning", "unsupported"),)


def other_format_conversation() -> list[MessageAppended]:
    """A Claude turn with thinking and parallel calls, and a Chat Completions one with an image."""
    thinking = ReasoningBlock(text="Let me look both up.", signature="EqQBCkYIAxgCIkD")
    calls = [ToolCallBlock("toolu_01", "get_weather", '{"city":"Paris"}'), ToolCallBlock("toolu_02", "t", "{}")]
    return [
        MessageAppended("u1", "user", "Weather in Paris?"),
        native_message(
            message_id="a1",
            role="assistant",
            api="anthropic",
            provider="anthropic",
            model="claude-x",
            blocks=[
                thinking,
                TextBlock("Checking.", extra='{"citations":null}'),
                *calls,
                OpaqueBlock("anthropic", '{"type":"server_tool_use"}'),
            ],
        ),
        native_message(
            message_id="t1",
            role="tool",
            api="anthropic",
            tool_call_id="toolu_01",
            is_error=True,
            blocks=[TextBlock("timeout")],
        ),
        native_message(message_id="t2", role="tool", api="anthropic", tool_call_id="toolu_02", blocks=[]),
        MessageAppended("a2", "assistant", "It is ", tool_calls=()),
        MessageAppended("u2", "user", (TextPart("and this?"), ImagePart("data:image/png;base64,iVBORw0K", "low"))),
        MessageAppended("a3", "assistant", "A cat.", reasoning_content="deepseek thoughts"),
    ]


def test_other_formats_are_served_as_responses_items_without_their_reasoning() -> None:
    rendered = serve(other_format_conversation())
    assert rendered.fragment["input"] == [
        {"type": "message", "role": "user", "content": "Weather in Paris?"},
        {"type": "message", "role": "assistant", "content": "Checking."},
        {"type": "function_call", "call_id": "toolu_01", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call", "call_id": "toolu_02", "name": "t", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "toolu_01", "output": "timeout"},
        {"type": "function_call_output", "call_id": "toolu_02", "output": ""},
        {"type": "message", "role": "assistant", "content": "It is "},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "and this?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0K", "detail": "low"},
            ],
        },
        {"type": "message", "role": "assistant", "content": "A cat."},
    ]
    assert rendered.dropped == (Dropped("a1", "reasoning", "other_provider"), Dropped("a1", "opaque", "unsupported"))
    served = json.dumps(rendered.fragment)
    assert "Let me look" not in served
    assert "deepseek" not in served


def test_responses_reasoning_is_not_served_to_another_format_target() -> None:
    rows = [stored(m, i) for i, m in enumerate(parse_items(fixture("reasoning_function_calls")["items"]))]
    assert all(r.api == "responses" and r.provider == "openai" for r in rows)
    anthropic = Target(format="anthropic", model="claude-x")
    assert FORMATS.reasoning_served(rows[2], anthropic) == "other_provider"
    assert FORMATS.reasoning_served(rows[2], RESPONSES) is None


def test_a_compaction_item_without_a_model_goes_to_openai_models_only() -> None:
    """A compaction item's encrypted_content is OpenAI's, as a reasoning item's is: appended
    without the model that made it, it still goes to no other provider's model."""
    items = [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-compacted"},
        {"type": "message", "role": "assistant", "content": "hello"},
    ]
    messages = parse_items(items)
    assert serve(messages).fragment["input"] == items
    for model in ("claude-sonnet-4-5", "gemini-2.5-pro"):
        rendered = serve(messages, target=Target(format="responses", model=model))
        assert "gAAAA-compacted" not in json.dumps(rendered.fragment)
        assert rendered.dropped == (Dropped(messages[1].message_id, "opaque", "other_provider"),)


def test_images_outside_the_image_turns_become_placeholders() -> None:
    user = parse_items(fixture("user_parts_and_refusal")["items"][0])[0]
    rendered = checked(
        render(
            RenderRequest(
                system=(), summary=None, target=RESPONSES, messages=(Selected(stored(user, 1), keep_images=False),)
            )
        )
    )
    parts = rendered.fragment["input"][0]["content"]
    assert [p["type"] for p in parts] == ["input_text", "input_text", "input_text", "input_file", "input_image"]
    assert parts[1] == {"type": "input_text", "text": "[image omitted]"}


def test_rendering_is_byte_stable_and_a_new_turn_only_appends() -> None:
    items = fixture("reasoning_function_calls")["items"]
    messages = parse_items(items)
    first = json.dumps(serve(messages).fragment)
    assert json.dumps(serve(messages).fragment) == first
    longer = serve([*messages, *parse_items([USER, {"type": "message", "role": "assistant", "content": "yo"}])])
    before = json.loads(first)["input"]
    assert longer.fragment["input"][: len(before)] == before
    assert json.dumps(longer.fragment["input"][: len(before)]) == json.dumps(before)


@pytest.mark.parametrize(
    ("fragment", "broken"),
    [
        ({"input": [OUTPUT]}, "without an earlier function_call"),
        ({"input": [USER, CALL, USER]}, "unanswered before a user message"),
        ({"input": [USER, CALL]}, "never answered"),
        ({"input": [USER, {"type": "reasoning", "id": "r", "summary": []}]}, "not followed by the item"),
        ({"input": [{"type": "reasoning", "id": "r", "summary": []}, USER]}, "followed by 'user'"),
        ({"input": [{"type": "reasoning", "id": "r"}, CALL, OUTPUT]}, "without a summary"),
        ({"input": [{"role": "robot", "content": "x"}]}, "unknown role"),
        ({"input": [CALL, CALL, OUTPUT]}, "used twice"),
        ({"input": [{"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}]}, "takes no"),
        ({"input": [], "messages": []}, "unexpected key"),
    ],
)
def test_the_rule_checker_finds_each_breach(fragment: dict[str, Any], broken: str) -> None:
    assert any(broken in v for v in violations(fragment)), violations(fragment)


def test_a_call_cut_short_keeps_its_partial_arguments() -> None:
    (message,) = parse_items({**CALL, "status": "incomplete", "arguments": '{"city": "Par'})
    assert message.tool_calls == (ToolCall("c1", "f", '{"city": "Par'),)
