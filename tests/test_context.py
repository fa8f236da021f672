"""Context assembly: every array it returns is valid and within budget, whatever the history."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projectors.tokens import IMAGE_PLACEHOLDER, count_messages, countable_text, get_encoding, image_parts, text_counter
from query_api.context import SUMMARY_HEADER, NeedOlderMessagesError, assemble
from query_api.context_types import ContextBudgetExceededError, ContextRequest, ModelSpec, StoredMessage, StoredSummary

ENCODING = get_encoding("o200k_base")
SPEC = ModelSpec(encoding="o200k_base")


count = text_counter("o200k_base")


class Builder:
    """Stored messages as the projection would store them (token counts included)."""

    def __init__(self) -> None:
        self.messages: list[StoredMessage] = []

    def add(self, role: str, content: Any = None, **fields: Any) -> StoredMessage:
        seq = len(self.messages)
        calls = tuple(fields.pop("tool_calls", ()))
        reasoning = fields.get("reasoning_content")
        m = StoredMessage(
            seq=seq,
            epoch=0,
            message_id=f"m{seq}",
            role=role,
            content=content,
            tool_calls=calls,
            tokens=count(countable_text(content, calls)),
            reasoning_tokens=count(reasoning) if reasoning else 0,
            image_count=image_parts(content),
            **fields,
        )
        self.messages.append(m)
        return m


def call(call_id: str, args: str = '{"q": 1}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": args}}


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[StoredMessage], list[StoredMessage]]:
    """(system messages, other messages) of a random conversation: tool groups with several
    calls, partial answers, orphans, interrupted streams, redactions, flags, images."""
    b = Builder()
    system = [b.add("system", f"system prompt {i}") for i in range(draw(st.integers(0, 2)))]
    if draw(st.booleans()):
        b.add("assistant", "a greeting before any question")  # cannot open a context
    for t in range(draw(st.integers(0, 7))):
        content: Any = f"question {t} " * draw(st.integers(1, 20))
        if draw(st.integers(0, 4)) == 0:
            content = [
                {"type": "text", "text": f"look {t}"},
                {"type": "image_url", "image_url": {"url": "https://x/i.png", "detail": "auto"}},
            ]
        b.add("user", content, redacted=draw(st.integers(0, 9)) == 0)
        for s in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["text", "calls", "calls", "interrupted", "orphan"]))
            reasoning = draw(st.none() | st.just(f"thinking {t}.{s}"))
            if kind == "text":
                b.add(
                    "assistant",
                    f"answer {t}.{s} " * draw(st.integers(1, 30)),
                    reasoning_content=reasoning,
                    redacted=draw(st.integers(0, 9)) == 0,
                )
            elif kind in ("calls", "interrupted"):
                ids = [f"c{t}_{s}_{i}" for i in range(draw(st.integers(1, 3)))]
                b.add(
                    "assistant",
                    draw(st.sampled_from([None, f"let me look {t}.{s}"])),
                    tool_calls=[call(i) for i in ids],
                    reasoning_content=reasoning,
                    finish_reason="interrupted" if kind == "interrupted" else "tool_calls",
                    redacted=draw(st.integers(0, 9)) == 0,
                )
                answered = draw(st.lists(st.sampled_from(ids), unique=True)) if ids else []
                for i in answered:
                    b.add(
                        "tool",
                        f"result for {i} " * draw(st.integers(1, 10)),
                        tool_call_id=i,
                        name=draw(st.none() | st.just("lookup")),
                        redacted=draw(st.integers(0, 9)) == 0,
                    )
                if draw(st.integers(0, 5)) == 0 and answered:
                    b.add("tool", "second answer", tool_call_id=answered[0], flag="duplicate_tool_result")
            else:
                b.add("tool", "who asked?", tool_call_id="nobody", flag="unknown_tool_call")
    others = [m for m in b.messages if m.role != "system"]
    return system, others


requests = st.builds(
    ContextRequest,
    model=st.just("gpt-4o"),
    budget_tokens=st.integers(10, 3000),
    reserve_tokens=st.integers(0, 200),
    tools_tokens=st.integers(0, 100),
    reasoning=st.sampled_from(["omit", "tool_turns", "all"]),
    image_turns=st.integers(0, 3),
)
summaries = st.none() | st.builds(
    lambda n: StoredSummary("s1", "earlier: " + "facts " * n, 0, count("earlier: " + "facts " * n)),
    st.integers(1, 40),
)


def recount(messages: list[dict[str, Any]]) -> int:
    """An independent count of the served array: counting the messages themselves (OpenAI's
    published method), not the counts stored at projection."""
    return count_messages(messages, SPEC, ENCODING)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), summaries, requests)
def test_every_context_is_valid_and_within_budget(
    history: tuple[list[StoredMessage], list[StoredMessage]], summary: StoredSummary | None, request: ContextRequest
) -> None:
    system, others = history
    try:
        context = assemble(system=system, summary=summary, messages=others, request=request, spec=SPEC, count=count)
    except ContextBudgetExceededError as e:
        error = e
    else:
        error = None
    if error is not None:
        assert error.needed > error.available
        return
    served = list(context.messages)
    # Valid by the rules: assemble refuses (raises) an array with violations, which fails this
    # test; test_an_array_with_violations_is_refused_not_served keeps that guard honest.
    available = request.budget_tokens - request.reserve_tokens - request.tools_tokens
    assert context.token_count == recount(served)
    assert context.token_count <= available
    texts = " ".join(str(m.get("content")) for m in served)
    for m in others:  # never served: redacted or flagged messages
        if (m.redacted or m.flag) and isinstance(m.content, str) and m.content.strip():
            assert all(m.content != s.get("content") for s in served), (m, served)
    assert "a greeting before any question" not in texts
    if request.reasoning == "omit":
        assert not any("reasoning_content" in m for m in served)
    usable_users = [m for m in others if m.role == "user" and not m.redacted]
    served_users = [m for m in served if m["role"] == "user"]
    if usable_users:  # the newest question is always there, and dropping starts at the oldest
        assert served_users
        newest = usable_users[-1].content
        if isinstance(newest, list):  # its image may have become a placeholder: compare the text parts
            newest = [p for p in newest if p.get("type") == "text"]
            served_text = [p for p in served_users[-1]["content"] if p.get("type") == "text"]
            assert [p for p in served_text if p["text"] != IMAGE_PLACEHOLDER] == newest
        else:
            assert served_users[-1]["content"] == newest
        assert len(served_users) + context.dropped_turns == len(usable_users)


def test_tool_calls_without_results_and_interrupted_calls_are_left_out() -> None:
    b = Builder()
    b.add("user", "q")
    b.add("assistant", None, tool_calls=[call("a"), call("b")])
    b.add("tool", "ra", tool_call_id="a")  # b never answered
    b.add("assistant", "I was about to", tool_calls=[call("c", '{"q')], finish_reason="interrupted")
    b.add("user", "and?")
    context = assemble(
        system=[], summary=None, messages=b.messages, request=ContextRequest("gpt-4o", 10_000), spec=SPEC, count=count
    )
    assert [(m["role"], [c["id"] for c in m.get("tool_calls", [])]) for m in context.messages] == [
        ("user", []),
        ("assistant", ["a"]),
        ("tool", []),
        ("assistant", []),
        ("user", []),
    ]
    assert context.messages[3]["content"] == "I was about to"


def test_reasoning_policies() -> None:
    b = Builder()
    b.add("user", "q1")
    b.add("assistant", "plain", reasoning_content="r1")
    b.add("user", "q2")
    b.add("assistant", None, tool_calls=[call("a")], reasoning_content="r2")
    b.add("tool", "x", tool_call_id="a")
    b.add("assistant", "done", reasoning_content="r3")

    def reasoning(policy: str) -> list[str]:
        request = ContextRequest("deepseek-v4", 10_000, reasoning=policy)  # type: ignore[arg-type]
        ctx = assemble(system=[], summary=None, messages=b.messages, request=request, spec=SPEC, count=count)
        return [m["reasoning_content"] for m in ctx.messages if "reasoning_content" in m]

    assert reasoning("omit") == []
    assert reasoning("tool_turns") == ["r2", "r3"]  # DeepSeek: required in turns that called tools
    assert reasoning("all") == ["r1", "r2", "r3"]


def test_only_the_last_image_turns_keep_their_images() -> None:
    b = Builder()
    image = {"type": "image_url", "image_url": {"url": "https://x/i.png", "detail": "auto"}}
    for i in range(3):
        b.add("user", [{"type": "text", "text": f"look {i}"}, image])
        b.add("assistant", f"seen {i}")
    ctx = assemble(
        system=[], summary=None, messages=b.messages, request=ContextRequest("gpt-4o", 100_000), spec=SPEC, count=count
    )
    users = [m["content"] for m in ctx.messages if m["role"] == "user"]
    assert users[0][1] == {"type": "text", "text": IMAGE_PLACEHOLDER}
    assert users[1][1] == image
    assert users[2][1] == image


def test_summary_follows_the_system_prompts_and_compressed_is_reported() -> None:
    b = Builder()
    system = [b.add("system", "be brief")]
    b.add("user", "q")
    summary = StoredSummary("s", "the user is an outsourced employee", 0, count("the user is an outsourced employee"))
    ctx = assemble(
        system=system,
        summary=summary,
        messages=b.messages[1:],
        request=ContextRequest("gpt-4o", 1000),
        spec=SPEC,
        count=count,
    )
    assert [m["role"] for m in ctx.messages] == ["system", "system", "user"]
    assert ctx.messages[1]["content"] == SUMMARY_HEADER + summary.text
    assert ctx.compressed


def test_an_overlong_current_turn_loses_its_oldest_tool_groups_then_errors() -> None:
    b = Builder()
    b.add("user", "old question " * 50)
    b.add("assistant", "old answer " * 50)
    b.add("user", "now")
    for g in range(3):
        b.add("assistant", None, tool_calls=[call(f"g{g}")])
        b.add("tool", f"result {g} " * 100, tool_call_id=f"g{g}")
    full = assemble(
        system=[], summary=None, messages=b.messages, request=ContextRequest("gpt-4o", 100_000), spec=SPEC, count=count
    )
    tight = assemble(
        system=[],
        summary=None,
        messages=b.messages,
        request=ContextRequest("gpt-4o", full.token_count - 400),
        spec=SPEC,
        count=count,
    )
    assert tight.dropped_turns == 1  # the older turn went first ...
    ids = [m["tool_calls"][0]["id"] for m in tight.messages if m.get("tool_calls")]
    assert ids == ["g1", "g2"]  # ... then the current turn's oldest tool group
    assert tight.messages[0] == {"role": "user", "content": "now"}  # never the user message
    with pytest.raises(ContextBudgetExceededError) as info:
        assemble(
            system=[],
            summary=None,
            messages=b.messages,
            request=ContextRequest("gpt-4o", 100, reserve_tokens=95),
            spec=SPEC,
            count=count,
        )
    assert (info.value.needed, info.value.available) == (8, 5)  # priming 3 + the bare question 5
    assert "needs at least" in str(info.value)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), summaries, requests, st.integers(1, 40))
def test_reading_only_the_newest_messages_gives_the_same_context(
    history: tuple[list[StoredMessage], list[StoredMessage]],
    summary: StoredSummary | None,
    request: ContextRequest,
    newest: int,
) -> None:
    """A long history is read for its tail: the answer must be the one the whole range gives,
    or the assembler must ask for the rest."""
    system, others = history
    usable_turns = sum(1 for m in others if m.role == "user" and not m.redacted)
    tail = others[-newest:]

    def run(messages: list[StoredMessage], **partial: Any) -> Any:
        try:
            return assemble(
                system=system, summary=summary, messages=messages, request=request, spec=SPEC, count=count, **partial
            )
        except ContextBudgetExceededError as e:
            return ("exceeded", e.needed, e.available)

    whole = run(others)
    try:
        partial = run(tail, complete=len(tail) == len(others), usable_turns=usable_turns)
    except NeedOlderMessagesError:
        return
    assert partial == whole
