"""Every format, on every generated conversation: the served fragment passes the format's rule
checker (assemble refuses otherwise) and the provider SDK's own request types; reasoning blobs
reach only the provider (and model, where bound) that made them, and never as text."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.event_types import MessageAppended
from projectors.tokens import model_spec
from query_api.context import assemble
from query_api.context_types import ContextBudgetExceededError, ContextRequest
from query_api.formats.types import Target, reasoning_served
from tests.formats.every_format import TARGETS, conversations, count, secrets_of, stored, validate_with_sdk


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
        if reasoning_served(m, target) is not None:
            for secret in secrets_of(m):
                assert secret not in served, (m.message_id, secret)
        if fmt != "chat_completions" and m.reasoning_content:
            assert m.reasoning_content not in served  # DeepSeek's reasoning goes to Chat Completions only
    assert ctx.token_count <= budget
