"""The ``gemini`` format: Gemini payloads parsed on append, rendered back on serve, checked
against Gemini's rules (``violations``) and the google-genai SDK's own ``Content`` type."""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from google.genai import types as genai
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.blocks import MediaBlock, OpaqueBlock, ReasoningBlock, TextBlock, ToolCallBlock
from events.errors import NativeFormatError
from events.event_types import MessageAppended, Usage
from events.formats.gemini.keys import SNAKE
from events.formats.gemini.parse import parse
from events.formats.gemini.render import SKIP_SIGNATURE, render
from events.formats.gemini.rules import violations
from events.formats.rendering import Dropped, Rendered, RenderRequest, Selected, Target
from events.strict_json import compact_json
from events.validation import validate_message
from query_api.context_types import StoredMessage
from tests.formats.every_format import stored

FIXTURES = Path(__file__).parent.parent / "fixtures" / "formats" / "gemini"


# --- helpers -------------------------------------------------------------------------------


def ids() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"m{next(counter)}"


def select(messages: Sequence[StoredMessage]) -> tuple[Selected, ...]:
    """Every answered call of each assistant message served (what the assembler does)."""
    out = []
    for i, m in enumerate(messages):
        answered: set[str] = set()
        if m.role == "assistant":
            for later in messages[i + 1 :]:
                if later.role != "tool":
                    break
                answered.add(later.tool_call_id or "")
        call_ids = tuple(c["id"] for c in m.tool_calls if c["id"] in answered)
        out.append(Selected(m, call_ids=call_ids))
    return tuple(out)


def parse_all(contents: Iterable[Any], *, model: str | None) -> list[MessageAppended]:
    new_id = ids()
    out: list[MessageAppended] = []
    for content in contents:
        payload = dict(content)
        if model is not None and payload["role"] == "model":
            payload["model"] = model  # the convlog extension: who wrote a bare Content
        out.extend(parse(payload, new_id=new_id).messages)
    return out


def rows(messages: Sequence[MessageAppended]) -> list[StoredMessage]:
    return [stored(m, seq) for seq, m in enumerate(messages, 1)]


def serve(
    messages: Sequence[StoredMessage],
    *,
    model: str,
    system: Sequence[StoredMessage] = (),
    summary: str | None = None,
    keep_images: bool = True,
) -> Rendered:
    selected = tuple(Selected(s.message, s.call_ids, keep_images=keep_images) for s in select(messages))
    rendered = render(RenderRequest(tuple(system), summary, selected, Target("gemini", model)))
    checked(rendered.fragment)
    return rendered


def checked(fragment: dict[str, Any]) -> None:
    """Every rendered fragment: no rule broken, and the SDK's own request types accept it."""
    assert violations(fragment) == []
    for content in fragment["contents"]:
        genai.Content.model_validate(content)
    if "system_instruction" in fragment:
        genai.Content.model_validate(fragment["system_instruction"])
    json.dumps(fragment, allow_nan=False)  # plain JSON


def fixture(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return doc


DOC_EXAMPLES = [
    "parallel_function_calls.json",
    "sequential_function_calls.json",
    "inline_image.json",
    "code_execution.json",
]


# --- round trip ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", DOC_EXAMPLES)
def test_a_documented_history_comes_back_as_it_was_appended(name: str) -> None:
    doc = fixture(name)
    messages = parse_all(doc["contents"], model=doc["model"])
    for message in messages:
        validate_message(message)  # what the producer checks before it appends
    rendered = serve(rows(messages), model=doc["model"])
    assert rendered.fragment == {"contents": doc["contents"]}
    assert rendered.dropped == ()
    opaque = [b.json for m in messages for b in m.blocks if isinstance(b, OpaqueBlock)]
    served = [compact_json(p) for c in rendered.fragment["contents"] for p in c["parts"]]
    assert all(o in served for o in opaque)  # byte for byte


def test_parallel_calls_pair_with_their_responses_by_name_and_order() -> None:
    doc = fixture("parallel_function_calls.json")
    messages = parse_all(doc["contents"], model=doc["model"])
    assistant = messages[1]
    calls = [b for b in assistant.blocks if isinstance(b, ToolCallBlock)]
    assert [(c.id, c.item_id, c.arguments) for c in calls] == [
        ("get_current_temperature:0", None, '{"location":"Paris"}'),
        ("get_current_temperature:1", None, '{"location":"London"}'),
    ]
    assert calls[0].signature == "Q2lRQmNzamFmUWlQbUZCSmVkdmVyT3Q1"
    assert calls[1].signature is None
    tools = messages[2:4]
    assert [(t.role, t.tool_call_id, t.content) for t in tools] == [
        ("tool", "get_current_temperature:0", '{"temp":"15C"}'),
        ("tool", "get_current_temperature:1", '{"temp":"12C"}'),
    ]
    assert assistant.finish_reason is None  # a bare Content reports none
    assert all(m.api == "gemini" and m.provider == "google" for m in messages)
    assert [m.message_id for m in messages] == ["m1", "m2", "m3", "m4", "m5"]


def test_native_function_call_ids_are_kept_and_served_back() -> None:
    contents = [
        {"role": "user", "parts": [{"text": "weather?"}]},
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"id": "fc-1", "name": "weather", "args": {"city": "Oslo"}},
                    "thoughtSignature": "c2ln",
                },
                {"functionCall": {"id": "fc-2", "name": "weather", "args": {"city": "Rome"}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"id": "fc-2", "name": "weather", "response": {"t": 20}}},
                {"functionResponse": {"id": "fc-1", "name": "weather", "response": {"t": 3}}},
            ],
        },
    ]
    messages = parse_all(contents, model="gemini-3-flash-preview")
    calls = [b for b in messages[1].blocks if isinstance(b, ToolCallBlock)]
    assert [(c.id, c.item_id) for c in calls] == [("fc-1", "fc-1"), ("fc-2", "fc-2")]
    assert [m.tool_call_id for m in messages[2:]] == ["fc-2", "fc-1"]
    assert serve(rows(messages), model="gemini-3-flash-preview").fragment["contents"] == contents


def test_a_response_with_a_thought_summary_keeps_usage_model_and_signatures() -> None:
    doc = fixture("thought_summary_response.json")
    parsed = parse(doc["response"], new_id=ids())
    assert parsed.native_id == "mP2xaJ3bKqvWz7IPvN2nmQs"
    (answer,) = parsed.messages
    assert answer.model == "gemini-2.5-flash"
    assert answer.finish_reason == "stop"
    assert answer.usage is not None
    usage = answer.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.reasoning_tokens) == (12, 1221, 1200)
    thought, text = answer.blocks
    assert isinstance(thought, ReasoningBlock)
    assert (thought.text or "").startswith("**Listing the primes**")
    assert isinstance(text, TextBlock)
    assert json.loads(text.extra or "{}") == {"thoughtSignature": "Q2lBQmNzamFmWHRoaW5raW5nU2lnbmF0dXJl"}
    assert answer.content == "The sum of the first 50 prime numbers is **5117**."  # the view: no thought
    history = parse_all(doc["request"], model=None) + list(parsed.messages)
    rendered = serve(rows(history), model="gemini-2.5-flash")
    assert rendered.fragment["contents"] == [*doc["request"], doc["response"]["candidates"][0]["content"]]


def test_an_sdk_object_is_read_in_snake_case_and_served_back_in_snake_case() -> None:
    sdk = genai.Content(
        role="model",
        parts=[
            genai.Part(text="thinking", thought=True, thought_signature=b"thought-sig"),
            genai.Part(function_call=genai.FunctionCall(name="lookup", args={"q": "x"}), thought_signature=b"call-sig"),
            genai.Part(inline_data=genai.Blob(mime_type="image/png", data=b"\x89PNG")),
        ],
    )
    native = sdk.model_dump(mode="json", exclude_none=True)
    user = {"role": "user", "parts": [{"text": "look it up"}]}
    answer = {"role": "user", "parts": [{"function_response": {"name": "lookup", "response": {"hit": True}}}]}
    new_id = ids()
    messages = [*parse(user, new_id=new_id).messages]
    model = parse(sdk, new_id=new_id).messages[0]
    messages.append(MessageAppended(**{**_fields(model), "model": "gemini-3-pro-preview"}))
    messages.extend(parse(answer, new_id=new_id).messages)
    rendered = serve(rows(messages), model="gemini-3-pro-preview")
    assert rendered.fragment["contents"] == [user, native, answer]
    assert "thought_signature" in native["parts"][1]


FINISHES = [
    ("STOP", "stop"),
    ("MAX_TOKENS", "length"),
    ("SAFETY", "content_filter"),
    ("RECITATION", "content_filter"),
    ("OTHER", "stop"),
]


@pytest.mark.parametrize(("reason", "finish"), FINISHES)
def test_an_sdk_response_object_gives_its_usage_and_finish_reason(reason: str, finish: str) -> None:
    response = genai.GenerateContentResponse(
        candidates=[
            genai.Candidate(
                content=genai.Content(role="model", parts=[genai.Part(text="hi")]),
                finish_reason=genai.FinishReason(reason),
            )
        ],
        usage_metadata=genai.GenerateContentResponseUsageMetadata(
            prompt_token_count=50, candidates_token_count=2, cached_content_token_count=40
        ),
        model_version="gemini-2.5-flash",
        response_id="resp-1",
    )
    parsed = parse(response, new_id=ids())
    (message,) = parsed.messages
    assert parsed.native_id == "resp-1"
    assert (message.finish_reason, message.model) == (finish, "gemini-2.5-flash")
    assert message.usage == Usage(prompt_tokens=50, completion_tokens=2, cached_tokens=40)


def _fields(m: MessageAppended) -> dict[str, Any]:
    return {name: getattr(m, name) for name in m.__dataclass_fields__}


# --- switching model or format -------------------------------------------------------------


def test_to_another_gemini_model_thoughts_and_signatures_are_dropped_and_calls_get_the_skip_value() -> None:
    doc = fixture("sequential_function_calls.json")
    contents = copy.deepcopy(doc["contents"])
    contents[1]["parts"].insert(
        0, {"text": "I should check the flight first.", "thought": True, "thoughtSignature": "dGhvdWdodA=="}
    )
    messages = parse_all(contents, model=doc["model"])
    rendered = serve(rows(messages), model="gemini-2.5-pro")
    served = rendered.fragment["contents"]
    assert served[1]["parts"] == [
        {"functionCall": {"name": "check_flight", "args": {"flight": "AA100"}}, "thoughtSignature": SKIP_SIGNATURE}
    ]
    assert served[3]["parts"][0]["thoughtSignature"] == SKIP_SIGNATURE
    assert "I should check" not in json.dumps(served)  # never as text
    assert set(rendered.dropped) == {
        Dropped("m2", "reasoning", "other_model"),
        Dropped("m2", "signature", "other_model"),
        Dropped("m4", "signature", "other_model"),
    }


def test_a_bare_model_content_without_its_model_is_served_as_another_models() -> None:
    doc = fixture("parallel_function_calls.json")
    messages = parse_all(doc["contents"], model=None)
    served = serve(rows(messages), model=doc["model"]).fragment["contents"]
    assert served[1]["parts"][0]["thoughtSignature"] == SKIP_SIGNATURE
    assert "thoughtSignature" not in served[3]["parts"][0]


def chat_row(seq: int, role: str, content: Any = None, **kw: Any) -> StoredMessage:
    return StoredMessage(seq=seq, epoch=0, message_id=f"c{seq}", role=role, content=content, **kw)


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_chat_completions_and_anthropic_messages_are_converted_and_reasoning_dropped() -> None:
    system = [chat_row(0, "system", "You are terse.")]
    messages = [
        chat_row(
            1,
            "user",
            [
                {"type": "text", "text": "Weather in Paris and Rome?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        ),
        chat_row(
            2,
            "assistant",
            None,
            reasoning_content="the user wants two cities",
            model="deepseek-reasoner",
            tool_calls=(call("call_1", "weather", '{"city":"Paris"}'), call("call_2", "weather", "not json")),
        ),
        chat_row(3, "tool", "rain", tool_call_id="call_2"),  # answered out of order
        chat_row(4, "tool", "no such city", tool_call_id="call_1", is_error=True),
        chat_row(
            5,
            "assistant",
            None,
            api="anthropic",
            provider="anthropic",
            model="claude-sonnet-4-5",
            blocks=(
                ReasoningBlock(text="both done", signature="EqQBCkgI"),
                TextBlock("Rain in Rome.", extra='{"citations":[]}'),
                OpaqueBlock("anthropic", '{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}'),
            ),
        ),
        chat_row(6, "user", "thanks", tool_calls=()),
    ]
    rendered = serve(messages, model="gemini-3-pro-preview", system=system, summary="Summary: earlier talk")
    assert rendered.fragment == {
        "system_instruction": {"parts": [{"text": "You are terse."}, {"text": "Summary: earlier talk"}]},
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "Weather in Paris and Rome?"},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                ],
            },
            {
                "role": "model",
                "parts": [
                    {
                        "functionCall": {"name": "weather", "args": {"city": "Paris"}},
                        "thoughtSignature": SKIP_SIGNATURE,
                    },
                    {"functionCall": {"name": "weather", "args": {"arguments": "not json"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "weather", "response": {"error": "no such city"}}},
                    {"functionResponse": {"name": "weather", "response": {"output": "rain"}}},
                ],
            },
            {"role": "model", "parts": [{"text": "Rain in Rome."}]},
            {"role": "user", "parts": [{"text": "thanks"}]},
        ],
    }
    assert set(rendered.dropped) == {
        Dropped("c5", "reasoning", "other_provider"),
        Dropped("c5", "opaque", "unsupported"),
    }
    assert "the user wants two cities" not in json.dumps(rendered.fragment)


def test_a_responses_call_keeps_its_item_id_on_both_sides() -> None:
    blocks = (ToolCallBlock("call_9", "search", '{"q":"x"}', item_id="fc_9"),)
    messages = [
        chat_row(1, "user", "go"),
        chat_row(
            2,
            "assistant",
            api="responses",
            provider="openai",
            model="gpt-5",
            blocks=blocks,
            tool_calls=(call("call_9", "search", '{"q":"x"}'),),
        ),
        chat_row(
            3, "tool", "found", tool_call_id="call_9", api="responses", provider="openai", blocks=(TextBlock("found"),)
        ),
    ]
    contents = serve(messages, model="gemini-3-pro-preview").fragment["contents"]
    assert contents[1]["parts"][0]["functionCall"]["id"] == "fc_9"
    response = {"name": "search", "response": {"output": "found"}, "id": "fc_9"}
    assert contents[2]["parts"] == [{"functionResponse": response}]


def test_old_images_become_the_placeholder_text() -> None:
    doc = fixture("inline_image.json")
    messages = parse_all(doc["contents"], model=doc["model"])
    contents = serve(rows(messages), model=doc["model"], keep_images=False).fragment["contents"]
    assert contents[0]["parts"] == [{"text": "[image omitted]"}, {"text": "Caption this image."}]


# --- byte stability ------------------------------------------------------------------------


def test_appending_a_turn_only_appends_contents_and_the_same_input_renders_the_same_bytes() -> None:
    doc = fixture("sequential_function_calls.json")
    messages = rows(parse_all(doc["contents"], model=doc["model"]))
    before = serve(messages, model=doc["model"]).fragment
    again = serve(messages, model=doc["model"]).fragment
    assert json.dumps(before) == json.dumps(again)
    more = [*messages, chat_row(99, "user", "and the hotel?"), chat_row(100, "assistant", "Booked.")]
    after = serve(more, model=doc["model"]).fragment
    assert json.dumps(after["contents"][: len(before["contents"])]) == json.dumps(before["contents"])
    assert len(after["contents"]) == len(before["contents"]) + 2


# --- refused payloads ----------------------------------------------------------------------

TEXT = {"text": "hi"}
CALL = {"functionCall": {"name": "f", "args": {}}}
RESPONSE = {"functionResponse": {"name": "f", "response": {}}}


@pytest.mark.parametrize(
    ("payload", "code", "field"),
    [
        ({"role": "system", "parts": [TEXT]}, "unknown_role", "role"),
        ({"role": "function", "parts": [TEXT]}, "unknown_role", "role"),
        ({"parts": [TEXT]}, "missing_role", "role"),
        (
            {"role": "model", "parts": [TEXT, RESPONSE]},
            "function_response_in_model_content",
            "parts[1].functionResponse",
        ),
        ({"role": "user", "parts": [CALL]}, "function_call_in_user_content", "parts[0].functionCall"),
        (
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": [1]}}]},
            "invalid_function_args",
            "parts[0].functionCall.args",
        ),
        (
            {"role": "model", "parts": [{"functionCall": {"args": {}}}]},
            "missing_function_name",
            "parts[0].functionCall.name",
        ),
        (
            {"role": "user", "parts": [{"functionResponse": {"response": {}}}]},
            "missing_function_name",
            "parts[0].functionResponse.name",
        ),
        (
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": "ok"}}]},
            "function_response_not_object",
            "parts[0].functionResponse.response",
        ),
        (
            {"role": "user", "parts": [{"text": "x", "thoughtSignature": "c2ln"}]},
            "thought_signature_in_user_content",
            "parts[0].thoughtSignature",
        ),
        ({"role": "user", "parts": [{"text": "x", "thought": True}]}, "thought_in_user_content", "parts[0].thought"),
        (
            {"role": "model", "parts": [{"text": "x", "thoughtSignature": 7}]},
            "invalid_thought_signature",
            "parts[0].thoughtSignature",
        ),
        (
            {"role": "model", "parts": [{"text": "x", "thoughtSignature": "msg_01 not base64"}]},
            "invalid_thought_signature",
            "parts[0].thoughtSignature",
        ),
        (
            {
                "role": "user",
                "parts": [{"inlineData": {"mimeType": "image/png", "data": "data:image/png;base64,AA=="}}],
            },
            "invalid_inline_data",
            "parts[0].inlineData.data",
        ),
        (
            {"role": "model", "parts": [{"text": "x", "functionCall": {"name": "f"}}]},
            "multiple_part_data",
            "parts[0].functionCall",
        ),
        ({"role": "model", "parts": [{"thoughtSignature": "c2ln"}]}, "empty_part", "parts[0]"),
        ({"role": "model", "parts": []}, "empty_parts", "parts"),
        ({"role": "model", "parts": [{"text": 3}]}, "invalid_text", "parts[0].text"),
        (
            {"role": "user", "parts": [{"inlineData": {"data": "AA=="}}]},
            "invalid_inline_data",
            "parts[0].inlineData.mimeType",
        ),
        (
            {"role": "model", "parts": [CALL, CALL | {"functionCall": {"id": "f:0", "name": "f"}}]},
            "duplicate_function_call_id",
            "parts[1].functionCall",
        ),
        (
            {"role": "model", "parts": [{"text": "a", "thoughtSignature": "c2ln", "thought_signature": "c2ln"}]},
            "duplicate_field",
            "parts[0].thought_signature",
        ),
        ([], "empty_batch", ""),
        ([{"role": "user", "parts": [TEXT]}, {"role": "tool", "parts": [TEXT]}], "unknown_role", "[1].role"),
        ({"candidates": []}, "no_candidates", "candidates"),
        ({"candidates": [{"finishReason": "SAFETY"}]}, "no_content", "candidates[0].content"),
        (
            {"candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}]},
            "no_content",
            "candidates[0].content",
        ),
        (
            {
                "candidates": [{"content": {"role": "model", "parts": [TEXT]}}],
                "usageMetadata": {"promptTokenCount": -1},
            },
            "invalid_usage",
            "usageMetadata.promptTokenCount",
        ),
        ("hello", "invalid_payload", ""),
    ],
)
def test_a_payload_that_breaks_the_format_is_refused_with_its_rule_and_path(
    payload: Any, code: str, field: str
) -> None:
    with pytest.raises(NativeFormatError) as caught:
        parse(payload, new_id=ids())
    assert (caught.value.code, caught.value.field) == (code, field)


def test_a_call_without_args_and_a_response_with_more_keys_come_back_as_they_were() -> None:
    contents = [
        USER,
        {
            "role": "model",
            "parts": [{"functionCall": {"name": "now", "willContinue": False}, "thoughtSignature": "c2ln"}],
        },
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "now", "response": {"t": "noon"}, "scheduling": "SILENT"}}],
        },
    ]
    messages = parse_all(contents, model="gemini-3-pro-preview")
    assert messages[1].tool_calls[0].arguments == "{}"
    assert serve(rows(messages), model="gemini-3-pro-preview").fragment["contents"] == contents


def test_unmodelled_part_data_is_kept_verbatim_and_a_part_of_no_known_data_is_refused() -> None:
    """Gemini refuses a part without data of a kind it knows, so convlog does too (served back,
    it broke every gemini context of the conversation); unknown keys beside known data are kept."""
    part = {"executableCode": {"code": "print(1)", "language": "PYTHON"}, "futureKey": {"x": [1, 2.5, None]}}
    (message,) = parse({"role": "model", "parts": [part]}, new_id=ids()).messages
    assert message.blocks == (OpaqueBlock("gemini", compact_json(part)),)
    unknown = {"videoMetadata": {"startOffset": "1s"}, "futurePart": {"x": [1, 2.5, None]}}
    with pytest.raises(NativeFormatError) as info:
        parse({"role": "model", "parts": [unknown]}, new_id=ids())
    assert (info.value.code, info.value.field) == ("empty_part", "parts[0]")


def test_file_data_and_media_extras_round_trip() -> None:
    uri = "https://generativelanguage.googleapis.com/v1beta/files/abc"
    parts = [
        {"fileData": {"fileUri": uri, "mimeType": "application/pdf"}},
        {"text": "Summarize.", "partMetadata": {"k": "v"}},
    ]
    messages = parse_all([{"role": "user", "parts": parts}], model=None)
    (block, _) = messages[0].blocks
    assert isinstance(block, MediaBlock)
    assert (block.kind, block.url, block.media_type) == ("file", parts[0]["fileData"]["fileUri"], "application/pdf")
    assert serve(rows(messages), model="gemini-2.5-flash").fragment["contents"] == [{"role": "user", "parts": parts}]


# --- the rule checker ----------------------------------------------------------------------


def model_call(name: str, *, signature: str | None = None) -> dict[str, Any]:
    part: dict[str, Any] = {"functionCall": {"name": name, "args": {}}}
    if signature:
        part["thoughtSignature"] = signature
    return {"role": "model", "parts": [part]}


def answer(*names: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"functionResponse": {"name": n, "response": {}}} for n in names]}


USER = {"role": "user", "parts": [TEXT]}


@pytest.mark.parametrize(
    "contents",
    [
        [model_call("f", signature="c2ln"), answer("f")],  # starts with the model
        [USER, model_call("f")],  # call never answered
        [USER, model_call("f", signature="c2ln"), answer("f", "f")],  # two responses, one call
        [USER, model_call("f", signature="c2ln"), answer("g")],  # another function's response
        [USER, answer("f")],  # response without a call
        [USER, model_call("f", signature="c2ln"), answer("f"), model_call("g"), answer("g")],  # second step unsigned
        [USER, {"role": "assistant", "parts": [TEXT]}],
        [USER, {"role": "model", "parts": []}],
        [USER, {"role": "model", "parts": [{"text": ""}]}],
        [{"role": "user", "parts": [CALL]}],
    ],
)
def test_violations_finds_each_broken_rule(contents: list[Any]) -> None:
    assert violations({"contents": contents}) != []


def test_violations_checks_signatures_in_the_current_turn_only() -> None:
    older = [USER, model_call("f"), answer("f"), {"role": "model", "parts": [TEXT]}]
    assert violations({"contents": [*older, USER, model_call("g", signature="c2ln"), answer("g")]}) == []
    assert violations({"contents": [*older, USER, model_call("g"), answer("g")]}) != []


# --- generated conversations ---------------------------------------------------------------

NAMES = st.sampled_from(["search", "weather", "calc"])
SIGS = st.sampled_from(["c2lnLWE=", "c2lnLWI=", "U2lnbmF0dXJl"])
TEXTS = st.text(min_size=1, max_size=20)
ARGS = st.dictionaries(st.sampled_from(["q", "n", "deep"]), st.one_of(st.integers(), TEXTS, st.booleans()), max_size=2)


@st.composite
def turn(draw: st.DrawFn, snake: bool) -> list[dict[str, Any]]:
    """A user text, then steps of (model calls, user responses), then a model answer."""

    def k(camel: str) -> str:
        return SNAKE.get(camel, camel) if snake else camel

    out: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": draw(TEXTS)}]}]
    with_ids = draw(st.booleans())
    for step in range(draw(st.integers(0, 2))):
        parts: list[dict[str, Any]] = []
        if draw(st.booleans()):
            parts.append({"text": draw(TEXTS), "thought": True, k("thoughtSignature"): draw(SIGS)})
        names = draw(st.lists(NAMES, min_size=1, max_size=3))
        signed = draw(st.booleans())
        for j, name in enumerate(names):
            fc: dict[str, Any] = {"name": name, "args": draw(ARGS)}
            if with_ids:
                fc["id"] = f"id-{step}-{j}"
            part: dict[str, Any] = {k("functionCall"): fc}
            if j == 0 and signed:
                part[k("thoughtSignature")] = draw(SIGS)
            parts.append(part)
        out.append({"role": "model", "parts": parts})
        order = draw(st.permutations(range(len(names)))) if with_ids else range(len(names))
        responses = []
        for j in order:
            fr: dict[str, Any] = {"name": names[j], "response": {"result": draw(TEXTS)}}
            if with_ids:
                fr["id"] = f"id-{step}-{j}"
            responses.append({k("functionResponse"): fr})
        out.append({"role": "user", "parts": responses})
    answer_parts: list[dict[str, Any]] = [{"text": draw(TEXTS)}]
    if draw(st.booleans()):
        answer_parts[0][k("thoughtSignature")] = draw(SIGS)
    out.append({"role": "model", "parts": answer_parts})
    return out


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    snake = draw(st.booleans())
    return [c for _ in range(draw(st.integers(1, 3))) for c in draw(turn(snake))]


def signed(contents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``contents`` as served: a model content's first call without a signature gets the skip value."""
    out = copy.deepcopy(contents)
    for content in out:
        calls = [p for p in content["parts"] if "functionCall" in p or "function_call" in p]
        if calls and not ({"thoughtSignature", "thought_signature"} & calls[0].keys()):
            calls[0]["thought_signature" if "function_call" in calls[0] else "thoughtSignature"] = SKIP_SIGNATURE
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_generated_gemini_conversations_round_trip_and_obey_the_rules(contents: list[dict[str, Any]]) -> None:
    messages = rows(parse_all(contents, model="gemini-3-pro-preview"))
    same = serve(messages, model="gemini-3-pro-preview")
    assert same.fragment["contents"] == signed(contents)
    other = serve(messages, model="gemini-3-flash-preview")  # checked too: valid for another model
    assert all(d.what in {"reasoning", "signature"} and d.reason == "other_model" for d in other.dropped)


@st.composite
def mixed_turn(draw: st.DrawFn, start: int) -> list[StoredMessage]:
    """One turn whose messages come from any format: Chat Completions rows, Anthropic and
    Responses blocks (with their reasoning), Gemini contents; parallel calls answered in any
    order, sometimes an interrupted call that nobody answered."""
    seq = itertools.count(start)
    origin = st.sampled_from(["chat_completions", "anthropic", "responses", "gemini"])
    out: list[StoredMessage] = []
    user_blocks = draw(
        st.sampled_from(
            [
                (TextBlock("hello"),),
                (TextBlock("look"), MediaBlock("image", url="https://example.com/cat.png")),
                (OpaqueBlock("anthropic", '{"type":"document","source":{"type":"text","data":"x"}}'),),
            ]
        )
    )
    out.append(chat_row(next(seq), "user", "hello", blocks=user_blocks, api=draw(origin)))
    for _ in range(draw(st.integers(0, 2))):
        api = draw(origin)
        names = draw(st.lists(NAMES, min_size=1, max_size=3))
        n = next(seq)
        calls = [
            ToolCallBlock(
                f"call_{n}_{j}",
                name,
                compact_json(draw(ARGS)),
                item_id=f"fc_{n}_{j}" if api == "responses" else None,
                signature="c2ln" if api == "gemini" and j == 0 else None,
            )
            for j, name in enumerate(names)
        ]
        reasoning = ReasoningBlock(text=f"THINK-{n}", signature="c2ln" if api != "responses" else None)
        blocks = (reasoning, *calls) if api != "chat_completions" else tuple(calls)
        model = "gemini-3-pro-preview" if api == "gemini" else "other-model"
        out.append(
            chat_row(
                n,
                "assistant",
                blocks=blocks,
                api=api,
                model=model,
                tool_calls=tuple(call(c.id, c.name, c.arguments) for c in calls),
            )
        )
        if draw(st.booleans()):
            out.extend(
                chat_row(
                    next(seq),
                    "tool",
                    f"result {j}",
                    tool_call_id=calls[j].id,
                    is_error=draw(st.sampled_from([None, True, False])),
                )
                for j in draw(st.permutations(range(len(calls))))
            )
        else:
            break  # interrupted: its calls are not served, the turn ends here
    if draw(st.booleans()):
        out.append(chat_row(next(seq), "assistant", "done", model="other-model"))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.integers(0, 0), min_size=1, max_size=3).flatmap(
        lambda turns: st.tuples(*(mixed_turn(100 * (i + 1)) for i in range(len(turns))))
    ),
    st.sampled_from(["gemini-3-pro-preview", "gemini-2.5-flash"]),
)
def test_generated_mixed_format_conversations_are_valid_gemini_histories(
    turns: tuple[list[StoredMessage], ...], model: str
) -> None:
    messages = [m for t in turns for m in t]
    rendered = serve(messages, model=model, summary="Summary: before")
    served = json.dumps(rendered.fragment)
    answered = {m.tool_call_id for m in messages if m.role == "tool"}
    calls = [p for c in rendered.fragment["contents"] for p in c["parts"] if "functionCall" in p]
    assert len(calls) == sum(1 for m in messages for c in m.tool_calls if c["id"] in answered)
    for m in messages:
        for b in m.blocks:
            if isinstance(b, ReasoningBlock) and b.text and (m.api != "gemini" or model != m.model):
                assert b.text not in served  # never as text, never to another model
