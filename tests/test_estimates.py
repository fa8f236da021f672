"""Estimated token budgets (models without a tokenizer here), the cacheable prefix, and what a
format reports it dropped."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from events.blocks import OpaqueBlock, ReasoningBlock, TextBlock
from projectors.tokens import count_messages, get_encoding, model_spec
from query_api.cache_prefix import PrefixMemory, common_prefix_tokens
from query_api.context import assemble
from query_api.context_types import ContextBudgetExceededError, ContextRequest
from query_api.estimates import SAFETY_MARGIN
from tests.test_context import Builder, count

SPEC = model_spec("deepseek-chat")  # a model the table does not know: estimated
ENCODING = get_encoding("o200k_base")


def conversation(turns: int, *, reported: dict[int, int] | None = None, model: str = "deepseek-chat") -> Builder:
    """``turns`` question-answer turns and a last question; ``reported``: per turn, the prompt
    size its answer's usage reported."""
    b = Builder()
    for t in range(turns):
        b.add("user", f"question {t} " * 10)
        answer = b.add("assistant", f"answer {t} " * 10)
        if reported and t in reported:
            b.messages[-1] = replace(answer, model=model, prompt_tokens=reported[t])
    b.add("user", "the question now")
    return b


def _between(b: Builder, first: int, second: int) -> int:
    """The raw estimate of what came between the answers of two turns: the first answer and the
    question after it (2 units a turn: question, answer)."""
    ctx = assemble(
        system=[],
        summary=None,
        messages=b.messages,
        request=ContextRequest("deepseek-chat", 10**6),
        spec=SPEC,
        count=count,
    )
    costs = [tokens for _, tokens in ctx.units]
    return sum(costs[2 * first + 1 : 2 * second + 1])


def test_an_uncalibrated_estimate_keeps_the_safety_margin_free() -> None:
    b = conversation(3)
    whole = assemble(
        system=[],
        summary=None,
        messages=b.messages,
        request=ContextRequest("deepseek-chat", 100_000),
        spec=SPEC,
        count=count,
    )
    assert SPEC.estimated
    assert whole.estimate is not None
    assert whole.estimate.factor == 1.0
    assert whole.estimate.calibrated_by is None
    raw = count_messages(whole.messages, SPEC, ENCODING)
    assert whole.estimate.raw_tokens == raw == whole.token_count
    # A budget the raw estimate fits, but not with the margin: the oldest turn goes.
    tight = assemble(
        system=[],
        summary=None,
        messages=b.messages,
        request=ContextRequest("deepseek-chat", raw + 1),
        spec=SPEC,
        count=count,
    )
    assert tight.dropped_turns >= 1
    assert tight.token_count * (1 + SAFETY_MARGIN) <= raw + 1


def test_the_growth_of_the_reported_prompt_between_two_answers_calibrates_the_estimate() -> None:
    between = _between(conversation(3), 1, 2)
    # 300: what the system prompt and the tool definitions add to both figures; it cancels out.
    b = conversation(3, reported={1: 300 + 1000, 2: 300 + 1000 + 2 * between})
    ctx = assemble(
        system=[],
        summary=None,
        messages=b.messages,
        request=ContextRequest("deepseek-chat", 10**6),
        spec=SPEC,
        count=count,
    )
    assert ctx.estimate is not None
    assert ctx.estimate.calibrated_by == b.messages[5].message_id
    assert ctx.estimate.factor == 2.0
    assert ctx.token_count == math.ceil(ctx.estimate.raw_tokens * 2.0)
    # One answer with usage says nothing yet; another model's usage says nothing about this one's.
    for other in (conversation(3, reported={2: 999}), conversation(3, reported={1: 100, 2: 999}, model="qwen-max")):
        ctx = assemble(
            system=[],
            summary=None,
            messages=other.messages,
            request=ContextRequest("deepseek-chat", 10**6),
            spec=SPEC,
            count=count,
        )
        assert ctx.estimate is not None
        assert ctx.estimate.calibrated_by is None


def test_a_prompt_that_shrank_between_two_answers_is_not_taken_for_a_factor() -> None:
    """The window moved or a summary replaced turns between them: the older pair decides."""
    between = _between(conversation(4), 1, 2)
    b = conversation(4, reported={1: 1000, 2: 1000 + 3 * between, 3: 500})
    ctx = assemble(
        system=[],
        summary=None,
        messages=b.messages,
        request=ContextRequest("deepseek-chat", 10**6),
        spec=SPEC,
        count=count,
    )
    assert ctx.estimate is not None
    assert ctx.estimate.calibrated_by == b.messages[5].message_id
    assert ctx.estimate.factor == 3.0


def test_a_budget_error_counts_in_calibrated_tokens() -> None:
    b = conversation(2, reported={0: 100, 1: 10_000})
    with pytest.raises(ContextBudgetExceededError) as raised:
        assemble(
            system=[],
            summary=None,
            messages=b.messages,
            request=ContextRequest("deepseek-chat", 5),
            spec=SPEC,
            count=count,
        )
    assert raised.value.available == 5
    assert raised.value.needed > 5


def test_an_exactly_counted_model_has_no_estimate() -> None:
    b = conversation(1)
    ctx = assemble(
        system=[],
        summary=None,
        messages=b.messages,
        request=ContextRequest("gpt-4o", 10**6),
        spec=model_spec("gpt-4o"),
        count=count,
    )
    assert ctx.estimate is None


def test_the_cacheable_prefix_is_what_the_next_context_repeats() -> None:
    b = conversation(2)
    request = ContextRequest("gpt-4o", 10**6)
    first = assemble(
        system=[], summary=None, messages=b.messages, request=request, spec=model_spec("gpt-4o"), count=count
    )
    b.add("assistant", "the answer now")
    b.add("user", "and one more")
    second = assemble(
        system=[], summary=None, messages=b.messages, request=request, spec=model_spec("gpt-4o"), count=count
    )
    shared = common_prefix_tokens(first.units, second.units)
    assert shared == first.token_count - model_spec("gpt-4o").reply_priming  # every message of the first
    memory = PrefixMemory(capacity=1)
    assert memory.served(("k", "chat_completions", "gpt-4o"), first.units) is None
    assert memory.served(("k", "chat_completions", "gpt-4o"), second.units) == shared
    assert memory.served(("other", "chat_completions", "gpt-4o"), first.units) is None
    assert memory.served(("k", "chat_completions", "gpt-4o"), second.units) is None  # evicted (capacity 1)


def test_chat_completions_serves_a_native_message_as_its_view_and_says_what_it_dropped() -> None:
    b = Builder()
    b.add("user", "hi")
    b.add(
        "assistant",
        "hello",
        blocks=(
            ReasoningBlock(text="thinking", signature="sig"),
            TextBlock("hello"),
            OpaqueBlock("anthropic", '{"type":"server_tool_use"}'),
        ),
        api="anthropic",
        model="claude-sonnet-4-5",
    )
    ctx = assemble(
        system=[],
        summary=None,
        messages=b.messages,
        request=ContextRequest("gpt-4o", 10**6),
        spec=model_spec("gpt-4o"),
        count=count,
    )
    assert ctx.messages[-1] == {"role": "assistant", "content": "hello"}
    assert "sig" not in str(ctx.fragment)
    assert "thinking" not in str(ctx.fragment)
    assert [(d.message_id, d.what, d.reason) for d in ctx.dropped] == [
        ("m1", "reasoning", "other_provider"),
        ("m1", "opaque", "unsupported"),
    ]
