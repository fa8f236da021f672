"""Every format, on every generated conversation: the served fragment passes the format's rule
checker (assemble refuses otherwise) and the provider SDK's own request types; reasoning blobs
reach only the provider (and model, where bound) that made them, and never as text."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.blocks import TextBlock, ToolCallBlock, native_message
from events.event_types import MessageAppended, ToolCall
from events.formats.registry import FORMATS
from events.formats.rendering import Target
from projectors.tokens import model_spec
from query_api.context import assemble
from query_api.context_types import ContextBudgetExceededError, ContextRequest
from tests.formats.every_format import SOURCES, TARGETS, conversations, count, secrets_of, stored, validate_with_sdk


@pytest.mark.parametrize(("fmt", "model"), TARGETS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=conversations(), budget=st.integers(200, 5000))
def test_every_context_of_every_format_is_valid_for_its_provider(
    fmt: str, model: str, history: list[MessageAppended], budget: int
) -> None:
    messages = [stored(m, i) for i, m in enumerate(history)]
    spec = model_spec(model)
    request = ContextRequest(model, budget, format=fmt, reasoning="tool_turns")  # type: ignore[arg-type]
    try:
        ctx = assemble(system=[], summary=None, messages=messages, request=request, spec=spec, count=count)
    except ContextBudgetExceededError:
        return
    validate_with_sdk(fmt, ctx.fragment)
    served = json.dumps(ctx.fragment, ensure_ascii=False)
    target = Target(fmt, model)  # type: ignore[arg-type]
    for m in messages:
        if FORMATS.reasoning_served(m, target) is not None:
            for secret in secrets_of(m):
                assert secret not in served, (m.message_id, secret)
        if fmt != "chat_completions" and m.reasoning_content:
            assert m.reasoning_content not in served  # DeepSeek's reasoning goes to Chat Completions only
    assert ctx.token_count <= budget


LIST_KEY = {"chat_completions": "messages", "anthropic": "messages", "responses": "input", "gemini": "contents"}


@pytest.mark.parametrize(("fmt", "model"), TARGETS)
def test_rendering_only_appends_while_the_window_does_not_move(fmt: str, model: str) -> None:
    """50 turns, answers from every format: each context's serialised array starts with the
    previous one's, element for element (the provider's prompt cache hits), and what comes before
    the array (system text) is byte-identical."""
    history: list[MessageAppended] = [
        MessageAppended(message_id="s", role="system", content="You are terse."),
    ]
    spec = model_spec(model)
    previous: dict[str, str] | None = None
    for turn in range(50):
        history.append(MessageAppended(message_id=f"u{turn}", role="user", content=f"question {turn}"))
        messages = [stored(m, i) for i, m in enumerate(history)]
        system, others = messages[:1], messages[1:]
        request = ContextRequest(model, 10**6, format=fmt)  # type: ignore[arg-type]
        ctx = assemble(system=system, summary=None, messages=others, request=request, spec=spec, count=count)
        rendered = {k: json.dumps(v, ensure_ascii=False, sort_keys=False) for k, v in ctx.fragment.items()}
        items = [json.dumps(x, ensure_ascii=False) for x in ctx.fragment[LIST_KEY[fmt]]]
        if previous is not None:
            assert {k: v for k, v in rendered.items() if k != LIST_KEY[fmt]} == {
                k: v for k, v in previous.items() if k != "_items"
            }
            before = json.loads(previous["_items"])
            assert items[: len(before)] == before, turn
        previous = {**{k: v for k, v in rendered.items() if k != LIST_KEY[fmt]}, "_items": json.dumps(items)}
        history.extend(_answer(turn))


def _answer(turn: int) -> list[MessageAppended]:
    """An answer from a provider that changes every turn: text, or a tool call and its result."""
    api, model = SOURCES[turn % len(SOURCES)]
    call = ToolCallBlock(f"call_{turn}", "lookup", f'{{"turn":{turn}}}')
    if api is None:
        if turn % 2:
            return [MessageAppended(message_id=f"a{turn}", role="assistant", content=f"answer {turn}", model=model)]
        return [
            MessageAppended(
                message_id=f"a{turn}",
                role="assistant",
                model=model,
                tool_calls=(ToolCall(call.id, call.name, call.arguments),),
            ),
            MessageAppended(message_id=f"t{turn}", role="tool", content="42", tool_call_id=call.id),
            MessageAppended(message_id=f"b{turn}", role="assistant", content=f"answer {turn}", model=model),
        ]
    blocks = [TextBlock(f"answer {turn}")] if turn % 2 else [call]
    out = [native_message(message_id=f"a{turn}", role="assistant", blocks=blocks, api=api, model=model)]  # type: ignore[arg-type]
    if not turn % 2:
        out.append(
            native_message(
                message_id=f"t{turn}",
                role="tool",
                blocks=[TextBlock("42")],
                api=api,  # type: ignore[arg-type]
                tool_call_id=call.id,
            )
        )
        out.append(
            native_message(
                message_id=f"b{turn}", role="assistant", blocks=[TextBlock(f"answer {turn}")], api=api, model=model
            )
        )  # type: ignore[arg-type]
    return out
