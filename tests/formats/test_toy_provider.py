"""A new provider format is one package plus one registry line: a toy fifth format (Mistral's
chat shape, tests/formats/toy_provider/), registered in a test with ``FORMATS.with_format`` —
no global patched — is appended through the producer, stored in the log, and served back in it
and in the four others, each context valid by its format's rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from events.embedded_log import EmbeddedEventLog
from events.errors import InvalidRequestError, NativeFormatError
from events.event_types import MessageAppended
from events.formats.registry import FORMATS
from events.formats.rendering import Target
from events.keys import ConversationKey
from events.producer import ConversationProducer
from events.reading import conversation_events
from projectors.tokens import model_spec
from query_api.context import assemble
from query_api.context_types import ContextRequest
from tests.formats import toy_provider
from tests.formats.every_format import count, stored

REGISTRY = FORMATS.with_format(toy_provider.FORMAT)  # the one registry line
KEY = ConversationKey("acme", "u1", "toy")
MODELS = {
    "chat_completions": "gpt-4o",
    "anthropic": "claude-sonnet-4-5",
    "responses": "gpt-5",
    "gemini": "gemini-2.5-pro",
    "mistral": "mistral-large-latest",
}
CALL = {"id": "D681PevKs", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}
PAYLOAD = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL], "model": "mistral-large-latest"},
    {"role": "tool", "content": "18C, sunny", "tool_call_id": "D681PevKs"},
    {"role": "assistant", "content": "It is 18C and sunny in Paris.", "model": "mistral-large-latest"},
]


async def _appended_and_stored(log: EmbeddedEventLog) -> list[MessageAppended]:
    producer = ConversationProducer(log, producer="test", formats=REGISTRY)
    appended = await producer.append_native(KEY, "mistral", PAYLOAD)
    assert len(appended) == len(PAYLOAD)
    return [event.body async for _, event in conversation_events(log, KEY) if isinstance(event.body, MessageAppended)]


async def test_a_message_appended_in_the_toy_format_is_served_back_in_it_and_in_the_four_others(
    log: EmbeddedEventLog,
) -> None:
    messages = [stored(m, i) for i, m in enumerate(await _appended_and_stored(log))]
    assert [m.provider for m in messages] == ["mistral"] * 4
    assert REGISTRY.names == (*FORMATS.names, "mistral")
    for name in REGISTRY.names:
        request = ContextRequest(MODELS[name], 100_000, format=name)  # "mistral": no ApiFormat, a test's name
        spec = model_spec(request.model)
        ctx = assemble(
            system=[], summary=None, messages=messages, request=request, spec=spec, count=count, formats=REGISTRY
        )
        assert REGISTRY.violations(ctx.fragment, Target(name, request.model)) == [], name
        text = json.dumps(ctx.fragment)
        for said in ("What is the weather in Paris?", "weather", "18C, sunny", "It is 18C and sunny in Paris."):
            assert said in text, (name, said)
        if name == "mistral":
            assert ctx.fragment == {"messages": [{k: v for k, v in m.items() if k != "model"} for m in PAYLOAD]}
    request = ContextRequest("mistral-large-latest", 100_000, format="mistral")
    spec = model_spec(request.model)
    estimated = assemble(
        system=[], summary=None, messages=messages, request=request, spec=spec, count=count, formats=REGISTRY
    )
    assert estimated.estimate is not None
    assert estimated.estimate.factor == 1.1  # its traits, asked by the estimator


async def test_the_toy_formats_rule_is_stated_once_for_both_sides(log: EmbeddedEventLog) -> None:
    """The 9-character tool call id: refused on append, made on serve, checked on every context."""
    producer = ConversationProducer(log, producer="test", formats=REGISTRY)
    bad = {"role": "assistant", "tool_calls": [{**CALL, "id": "call_1"}]}
    with pytest.raises(NativeFormatError) as refused:
        await producer.append_native(KEY, "mistral", [PAYLOAD[0], bad])
    assert (refused.value.code, refused.value.field) == ("invalid_tool_call_id", "[1].tool_calls[0].id")
    assert toy_provider.rules.violations({"messages": [bad]}) != []
    assert toy_provider.rules.CALL_ID.match(toy_provider.rules.wire_id("call_1"))


async def test_the_toy_format_is_no_format_of_convlogs_own(log: EmbeddedEventLog) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        await ConversationProducer(log, producer="test").append_native(KEY, "mistral", PAYLOAD)
    assert refused.value.code == "unknown_format"
    assert "mistral" not in FORMATS.names


def test_a_new_format_is_one_package_and_one_registry_line() -> None:
    package = Path(toy_provider.__file__).parent
    modules = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in package.glob("*.py")}
    assert sorted(modules) == ["__init__.py", "parse.py", "render.py", "rules.py"]
    assert sum(modules.values()) <= 150, modules  # 138 today: parse 41, render 43, rules 41, the object 13
    assert [d.name for d in package.iterdir() if d.is_dir() and d.name != "__pycache__"] == []
