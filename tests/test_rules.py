"""The valid-context rules (events/formats/chat_completions/rules.py): each breach a provider
would refuse is found, and the assembler refuses to serve an array the checker finds fault with."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from events.formats import chat_completions
from events.formats.chat_completions.rules import violations
from events.formats.registry import FORMATS, FormatRegistry
from query_api.context import assemble
from query_api.context_types import ContextRequest, ModelSpec, StoredMessage

SYSTEM = {"role": "system", "content": "be brief"}
USER = {"role": "user", "content": "what is 2+2?"}
ANSWER = {"role": "assistant", "content": "4"}


def calls(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids],
    }


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "content": "42", "tool_call_id": call_id}


def test_a_valid_array_has_no_violations() -> None:
    messages = [SYSTEM, SYSTEM, USER, calls("a", "b"), result("b"), result("a"), ANSWER, USER]
    assert violations(messages) == []
    thinking = {**ANSWER, "reasoning_content": "adding"}
    assert violations([USER, thinking], reasoning="all") == []
    assert violations([]) == []


@pytest.mark.parametrize(
    ("messages", "rule"),
    [
        ([USER, SYSTEM], "rule 1: a system message after a non-system message"),
        ([SYSTEM, ANSWER], "rule 2: the first non-system message is 'assistant', not 'user'"),
        ([result("a"), USER], "rule 2: the first non-system message is 'tool', not 'user'"),
        ([USER, result("a")], "rule 3: tool message 1 answers 'a', which no open tool call has"),
        (
            [USER, calls("a"), result("a"), result("a")],
            "rule 3: tool message 3 answers 'a', which no open tool call has",
        ),
        (
            [USER, calls("a", "b"), result("a"), ANSWER],
            "rule 3: message 3 (assistant) comes before the results of ['b']",
        ),
        ([USER, calls("a")], "rule 3: the context ends before the results of ['a']"),
        ([USER, calls("a", "a"), result("a"), result("a")], "rule 3: message 1 repeats a tool call id"),
        ([{**USER, "seq": 3}], "rule 4: message 0 (user) carries ['seq']"),
        (
            [USER, {**ANSWER, "reasoning_content": "x"}],
            "rule 4: message 1 carries reasoning_content under policy 'omit'",
        ),
    ],
)
def test_each_breach_is_found(messages: list[dict[str, Any]], rule: str) -> None:
    assert rule in violations(messages)


def test_assemble_refuses_an_array_the_rules_find_fault_with() -> None:
    """The context property tests rely on this guard: an array with violations is never served."""
    stored = StoredMessage(seq=0, epoch=0, message_id="m0", role="user", content="hi", tokens=1)
    request = ContextRequest("gpt-4o", 1000, 0, 0, "omit", 2)
    spec = ModelSpec(encoding="o200k_base")

    def run(formats: FormatRegistry = FORMATS) -> Any:
        return assemble(
            system=(), summary=None, messages=[stored], request=request, spec=spec, count=len, formats=formats
        )

    assert [m["content"] for m in run().messages] == ["hi"]
    broken = dataclasses.replace(chat_completions.FORMAT, violations=lambda fragment, target: ["rule 0: broken"])
    with pytest.raises(AssertionError, match="rule 0: broken"):
        run(FORMATS.with_format(broken))
