"""Token counting of served contexts: the model table, the cookbook's method, and the fast path.

The reference figures are from OpenAI's cookbook "How to count tokens with tiktoken"
(openai/openai-cookbook, examples/How_to_count_tokens_with_tiktoken.ipynb), each printed there
next to the ``usage.prompt_tokens`` the OpenAI API returned for the same request:

- section 6, the 6-message "corporate jargon" example (a system prompt, four system messages
  named example_user / example_assistant, one user message): 129 prompt tokens on
  gpt-3.5-turbo (0125), gpt-4-0613 and gpt-4; 124 on gpt-4o and gpt-4o-mini (notebook at
  commit c81359cdc6744f001e40c08a192604c5113fdab3); 127 on gpt-3.5-turbo-0301 (notebook at
  commit 06d9feb5e21e6fdc85f3ddce7731e05892758cd7, from when that model was served);
- section 7, the get_current_weather tools example with a 2-message conversation: 105 prompt
  tokens on gpt-3.5-turbo and gpt-4; 101 on gpt-4o and gpt-4o-mini (commit c81359cd...).
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.errors import ConfigurationError
from projectors.changes import TranscriptRow
from projectors.row_values import countable_text, image_count
from projectors.tokens import (
    ENCODINGS,
    IMAGE_PLACEHOLDER,
    MODEL_TABLE,
    ROLE_TOKENS,
    TOOL_CALL_TOKENS,
    TOOL_FORMATS,
    count_message,
    count_messages,
    count_tools,
    drop_images,
    get_encoding,
    message_cost,
    model_spec,
    normalize_model_name,
    text_counter,
)
from query_api.context_types import ModelSpec, StoredMessage

COOKBOOK_MESSAGES: list[dict[str, Any]] = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate jargon "
        "into plain English.",
    },
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities for "
        "increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client deliverable.",
    },
]

COOKBOOK_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                    "unit": {
                        "type": "string",
                        "description": "The unit of temperature to return",
                        "enum": ["celsius", "fahrenheit"],
                    },
                },
                "required": ["location"],
            },
        },
    }
]

COOKBOOK_TOOLS_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant that can answer to questions about the weather."},
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]


@cache
def counter(encoding: str) -> Any:
    return text_counter(encoding)


def count_for(model: str, messages: list[dict[str, Any]]) -> int:
    spec = model_spec(model)
    return count_messages(messages, spec, get_encoding(spec.encoding))


# --- the cookbook's figures ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-3.5-turbo", 129),
        ("gpt-3.5-turbo-0613", 129),
        ("gpt-3.5-turbo-0125", 129),
        ("gpt-4-0314", 129),
        ("gpt-4-0613", 129),
        ("gpt-4", 129),
        ("gpt-4o", 124),
        ("gpt-4o-2024-08-06", 124),
        ("gpt-4o-mini", 124),
        ("gpt-4o-mini-2024-07-18", 124),
        ("gpt-3.5-turbo-0301", 127),
    ],
)
def test_cookbook_example_conversation(model: str, expected: int) -> None:
    """Section 6 of the cookbook: the API returned 129 (cl100k_base models), 124 (gpt-4o and
    gpt-4o-mini) and 127 (gpt-3.5-turbo-0301) prompt tokens for this conversation."""
    assert count_for(model, COOKBOOK_MESSAGES) == expected


@pytest.mark.parametrize(
    ("model", "expected"),
    [("gpt-3.5-turbo", 105), ("gpt-4", 105), ("gpt-4o", 101), ("gpt-4o-mini", 101)],
)
def test_cookbook_tools_example(model: str, expected: int) -> None:
    """Section 7 of the cookbook: the API returned 105 (gpt-3.5-turbo, gpt-4) and 101 (gpt-4o,
    gpt-4o-mini) prompt tokens for these messages with these tools."""
    spec = model_spec(model)
    encoding = get_encoding(spec.encoding)
    total = count_messages(COOKBOOK_TOOLS_MESSAGES, spec, encoding) + count_tools(COOKBOOK_TOOLS, spec, encoding)
    assert total == expected


def test_tool_formats_are_the_cookbooks() -> None:
    o200k, cl100k = TOOL_FORMATS["o200k_base"], TOOL_FORMATS["cl100k_base"]
    assert (o200k.func_init, o200k.prop_init, o200k.prop_key) == (7, 3, 3)
    assert (cl100k.func_init, cl100k.prop_init, cl100k.prop_key) == (10, 3, 3)
    for fmt in (o200k, cl100k):
        assert (fmt.enum_init, fmt.enum_item, fmt.func_end) == (-3, 3, 12)


def test_count_tools_edges() -> None:
    spec = model_spec("gpt-4o")
    enc = get_encoding(spec.encoding)
    count = counter(spec.encoding)
    assert count_tools([], spec, enc) == 0
    bare = [{"type": "function", "function": {"name": "ping"}}]
    assert count_tools(bare, spec, enc) == 7 + count("ping:") + 12
    with_period = [{"type": "function", "function": {"name": "ping", "description": "Ping."}}]
    assert count_tools(with_period, spec, enc) == 7 + count("ping:Ping") + 12
    nested = {"type": "array", "description": "tags", "items": {"type": "string"}}
    flat = {"type": "array", "description": "tags"}

    def tool(prop: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"type": "function", "function": {"name": "tag", "parameters": {"properties": {"t": prop}}}}]

    items = count('{"items":{"type":"string"}}')  # estimate: the cookbook ignores nested schemas
    assert count_tools(tool(nested), spec, enc) == count_tools(tool(flat), spec, enc) + items
    ints = tool({"type": "integer", "description": "n", "enum": [1, 2]})
    enum = -3 + 3 + count("1") + 3 + count("2")
    assert count_tools(ints, spec, enc) == 7 + count("tag:") + 3 + 3 + enum + count("t:integer:n") + 12


# --- the model table -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-4o-2024-08-06",
        "gpt-4o-mini-2024-07-18",
        "chatgpt-4o-latest",
        "gpt-4.1",
        "gpt-4.1-mini",
        "gpt-4.1-nano-2025-04-14",
        "gpt-4.5-preview",
        "gpt-5",
        "gpt-5-mini",
        "gpt-5.1",
        "gpt-5.2-codex",
        "o1",
        "o1-mini",
        "o1-2024-12-17",
        "o3",
        "o3-mini",
        "o4-mini",
        "o4-mini-2025-04-16",
    ],
)
def test_o200k_families(model: str) -> None:
    assert model_spec(model) == ModelSpec(encoding="o200k_base")


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4",
        "gpt-4-0613",
        "gpt-4-32k",
        "gpt-4-turbo",
        "gpt-4-turbo-2024-04-09",
        "gpt-4-1106-preview",
        "gpt-3.5-turbo",
        "gpt-3.5-turbo-0613",
        "gpt-3.5-turbo-16k",
        "gpt-3.5-turbo-0125",
        "gpt-35-turbo",
    ],
)
def test_cl100k_families(model: str) -> None:
    assert model_spec(model) == ModelSpec(encoding="cl100k_base")


def test_gpt_35_turbo_0301_overheads() -> None:
    spec = model_spec("gpt-3.5-turbo-0301")
    assert (spec.encoding, spec.tokens_per_message, spec.tokens_per_name, spec.reply_priming) == (
        "cl100k_base",
        4,
        -1,
        3,
    )


@pytest.mark.parametrize(
    ("model", "normalized"),
    [
        ("GPT-4o", "gpt-4o"),
        ("  gpt-4O-Mini\n", "gpt-4o-mini"),
        ("ft:gpt-4o-mini-2024-07-18:acme:support:9abc", "gpt-4o-mini-2024-07-18"),
        ("openai/gpt-4.1", "gpt-4.1"),
    ],
)
def test_names_are_normalized(model: str, normalized: str) -> None:
    assert normalize_model_name(model) == normalized
    assert model_spec(model) == model_spec(normalized)
    assert not model_spec(model).estimated


@pytest.mark.parametrize("model", ["deepseek-v4", "qwen-max", "claude-sonnet-4", "gpt-4x", "o10", "gpt-40"])
def test_unknown_models_are_estimated(model: str) -> None:
    assert model_spec(model) == ModelSpec(encoding="o200k_base", estimated=True)
    assert model_spec(model, default_encoding="cl100k_base") == ModelSpec(encoding="cl100k_base", estimated=True)


@pytest.mark.parametrize("model", ["", "   ", "ft:", "openai/"])
def test_empty_model_name_is_an_error(model: str) -> None:
    with pytest.raises(ValueError, match="model name"):
        model_spec(model)


def test_unknown_default_encoding_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="p50k_base"):
        model_spec("qwen-max", default_encoding="p50k_base")


def test_table_is_data() -> None:
    families = [family for family, _ in MODEL_TABLE]
    assert len(families) == len(set(families))
    assert all(f == f.strip().lower() and f for f in families)
    assert {spec.encoding for _, spec in MODEL_TABLE} <= set(ENCODINGS)
    assert not any(spec.estimated for _, spec in MODEL_TABLE)


# --- count_message details -------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_role_tokens_are_one_token(encoding: str) -> None:
    for role, tokens in ROLE_TOKENS.items():
        assert counter(encoding)(role) == tokens


def test_parts_images_reasoning_and_special_text() -> None:
    spec = model_spec("gpt-4o")
    enc = get_encoding("o200k_base")
    count = counter("o200k_base")
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]
    message = {"role": "user", "content": parts}
    assert count_message(message, spec, enc) == 3 + 1 + count("look") + spec.image_tokens
    placeholder = {"role": "user", "content": drop_images(parts)}
    assert placeholder["content"][1] == {"type": "text", "text": IMAGE_PLACEHOLDER}
    assert count_message(placeholder, spec, enc) == 3 + 1 + count(f"look\n{IMAGE_PLACEHOLDER}")
    thinking = {"role": "assistant", "content": "42", "reasoning_content": "6 times 7"}
    assert count_message(thinking, spec, enc) == 3 + 1 + count("42") + count("6 times 7")
    special = {"role": "user", "content": "say <|endoftext|> please"}
    assert count_message(special, spec, enc) == 3 + 1 + count("say <|endoftext|> please")
    assert count_message({"role": "assistant", "content": None}, spec, enc) == 4


def test_tool_calls_estimate_against_the_one_public_measurement() -> None:
    """forestwanglin/openai-java#5 (Jan 2024): the API counted 35 prompt tokens on gpt-4 for
    this tool call and its result. Call ids are not counted; the per-call constant errs high."""
    call_id = "call_Id8ycVMsW8gdsf7kSXfgAcf1"
    arguments = '{\n  "location": "Boston, MA"\n}'
    messages: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "get_current_weather", "arguments": arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "name": "get_current_weather", "content": "29 degree celcius"},
    ]
    assert count_for("gpt-4", messages) == 35 + TOOL_CALL_TOKENS


# --- properties: sums, and the fast path equals the exact path --------------------------------

ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool"])
NAMES = st.none() | st.from_regex(r"[A-Za-z0-9_-]{1,24}", fullmatch=True)
MODELS = st.sampled_from(["gpt-4o", "gpt-4", "gpt-3.5-turbo-0301", "deepseek-v4"])


@st.composite
def text_messages(draw: st.DrawFn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": draw(ROLES), "content": draw(st.text(max_size=200))}
    name = draw(NAMES)
    if name:
        message["name"] = name
    return message


@settings(max_examples=150, deadline=None)
@given(st.lists(text_messages(), max_size=8), MODELS)
def test_count_messages_is_the_sum_plus_reply_priming(messages: list[dict[str, Any]], model: str) -> None:
    spec = model_spec(model)
    enc = get_encoding(spec.encoding)
    assert count_messages(messages, spec, enc) == sum(count_message(m, spec, enc) for m in messages) + 3


def stored_from(message: dict[str, Any], encoding: str) -> StoredMessage:
    """A StoredMessage as the projector would store it: counts from its own countable_text."""
    count = counter(encoding)
    row = TranscriptRow(
        conversation_key="t/u/c",
        seq=1,
        partition=0,
        offset=0,
        event_id="e",
        message_id="m",
        role=message["role"],
        content=message.get("content"),
        name=message.get("name"),
        tool_calls=message.get("tool_calls"),
        tool_call_id=message.get("tool_call_id"),
        reasoning_content=message.get("reasoning_content"),
        thinking_duration_ms=None,
        finish_reason=None,
        model=None,
        usage=None,
        metadata={},
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        epoch=0,
        turn=1,
        flag=None,
    )
    return StoredMessage(
        seq=1,
        epoch=0,
        message_id="m",
        role=row.role,
        content=row.content,
        name=row.name,
        tool_calls=tuple(message.get("tool_calls") or ()),
        tool_call_id=row.tool_call_id,
        reasoning_content=row.reasoning_content,
        tokens=count(countable_text(row)),
        reasoning_tokens=count(row.reasoning_content or ""),
        image_count=image_count(row),
    )


@settings(max_examples=200, deadline=None)
@given(text_messages(), MODELS)
def test_fast_path_equals_exact_path_for_text(message: dict[str, Any], model: str) -> None:
    spec = model_spec(model)
    stored = stored_from(message, spec.encoding)
    fast = message_cost(stored, spec, include_reasoning=False, keep_images=True, count=counter(spec.encoding))
    assert fast == count_message(message, spec, get_encoding(spec.encoding))


PARTS = st.lists(
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=40))
    | st.just({"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "high"}}),
    max_size=4,
)
CALLS = st.lists(
    st.builds(
        lambda i, n, a: {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}},
        st.integers(0, 99),
        st.from_regex(r"[a-z_]{1,20}", fullmatch=True),
        st.text(max_size=60),
    ),
    max_size=3,
)


@st.composite
def any_messages(draw: st.DrawFn) -> dict[str, Any]:
    optional = {
        "name": draw(NAMES),
        "tool_calls": draw(CALLS),
        "tool_call_id": draw(st.none() | st.just("call_7")),
        "reasoning_content": draw(st.none() | st.text(max_size=80)),
    }
    content = draw(st.none() | st.text(max_size=80) | PARTS)
    return {"role": draw(ROLES), "content": content} | {k: v for k, v in optional.items() if v}


@settings(max_examples=300, deadline=None)
@given(any_messages(), MODELS, st.booleans(), st.booleans())
def test_fast_path_equals_exact_path_for_served_messages(
    message: dict[str, Any], model: str, include_reasoning: bool, keep_images: bool
) -> None:
    """Parts, images (kept or replaced by the placeholder), tool calls, reasoning on or off."""
    spec = model_spec(model)
    stored = stored_from(message, spec.encoding)
    served = {k: v for k, v in message.items() if k != "reasoning_content" or include_reasoning}
    if not keep_images:
        served["content"] = drop_images(served["content"])
    fast = message_cost(
        stored, spec, include_reasoning=include_reasoning, keep_images=keep_images, count=counter(spec.encoding)
    )
    assert fast == count_message(served, spec, get_encoding(spec.encoding))


@settings(max_examples=100, deadline=None)
@given(any_messages(), st.booleans())
def test_fast_path_with_fewer_served_calls(message: dict[str, Any], keep_images: bool) -> None:
    spec = model_spec("gpt-4o")
    stored = stored_from(message, spec.encoding)
    served = dict(message) | {"tool_calls": list(stored.tool_calls[:1])}
    served.pop("reasoning_content", None)
    if not keep_images:
        served["content"] = drop_images(served["content"])
    fast = message_cost(
        stored,
        spec,
        include_reasoning=False,
        keep_images=keep_images,
        count=counter(spec.encoding),
        tool_calls=stored.tool_calls[:1],
    )
    assert fast == count_message(served, spec, get_encoding(spec.encoding))
