"""Generated conversations in the Anthropic format: round trip, rules, SDK types, byte stability."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.strict_json import compact_json
from events.validation import validate_message
from query_api.context_types import StoredMessage
from tests.formats.anthropic_support import native_messages, parse_all, render_checked, stored

MODEL = "claude-sonnet-4-5-20250929"
_words = st.text(alphabet="abcdefghij klmnop°é中", min_size=1, max_size=12).filter(str.strip)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | _words,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_words, inner, max_size=3),
    max_leaves=6,
)
_text_block = st.builds(lambda t: {"type": "text", "text": t}, _words)
_cited = st.builds(
    lambda t, c: {
        "type": "text",
        "text": t,
        "citations": [
            {
                "type": "char_location",
                "cited_text": c,
                "document_index": 0,
                "document_title": "d",
                "start_char_index": 0,
                "end_char_index": 3,
            }
        ],
    },
    _words,
    _words,
)
_image = st.sampled_from(
    [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
    ]
)
_thinking = st.one_of(
    st.builds(lambda t, s: {"type": "thinking", "thinking": t, "signature": s}, _words, _words),
    st.builds(lambda d: {"type": "redacted_thinking", "data": d}, _words),
)
_opaque = st.builds(
    lambda i, q: {"type": "server_tool_use", "id": f"srvtoolu_{i}", "name": "web_search", "input": {"query": q}},
    st.integers(0, 10**6),
    _words,
)


_result_bodies = st.sampled_from(
    [
        {"content": "ok"},
        {"content": [{"type": "text", "text": "r"}]},
        {},
        {"content": []},
        {"content": "failed", "is_error": True},
        {"content": [{"type": "text", "text": "x"}], "is_error": False},
        {
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image", "source": {"type": "url", "url": "https://e.x/a.gif"}},
            ]
        },
    ]
)
_cc_user = st.one_of(
    _words,
    st.just(
        [
            {"type": "text", "text": "t"},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ", "detail": "high"}},
        ]
    ),
)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Native MessageParams, alternating, every tool_use answered in the next user message."""
    out: list[dict[str, Any]] = []
    call_no = 0
    for _ in range(draw(st.integers(1, 4))):
        user = draw(st.lists(st.one_of(_text_block, _image), min_size=1, max_size=3))
        out.append({"role": "user", "content": draw(st.sampled_from([user, user[0].get("text") or user]))})
        for _ in range(draw(st.integers(0, 2))):
            thinking = draw(st.lists(_thinking, max_size=2))
            text = draw(st.lists(st.one_of(_text_block, _opaque), max_size=2))
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                call_no += 1
                calls.append(
                    {
                        "type": "tool_use",
                        "id": f"toolu_{call_no:04d}",
                        "name": "lookup",
                        "input": draw(st.dictionaries(_words, _json, max_size=3)),
                    }
                )
            out.append({"role": "assistant", "model": MODEL, "content": [*thinking, *text, *calls]})
            results = [{"type": "tool_result", "tool_use_id": c["id"], **draw(_result_bodies)} for c in calls]
            after = draw(st.lists(_text_block, max_size=1))
            out.append({"role": "user", "content": [*results, *after]})
        final = draw(st.lists(st.one_of(_text_block, _cited), min_size=1, max_size=2))
        out.append({"role": "assistant", "model": MODEL, "content": [*draw(st.lists(_thinking, max_size=1)), *final]})
    return out


def _payloads(messages: list[dict[str, Any]], batch: bool) -> list[Any]:
    return [messages] if batch else list(messages)


def _stored(payloads: list[Any]) -> list[StoredMessage]:
    parsed = parse_all(payloads)
    for m in parsed:
        validate_message(m)  # the producer accepts every message the parser makes
    return [stored(m, seq) for seq, m in enumerate(parsed, 1)]


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), st.booleans())
def test_generated_conversations_round_trip_to_the_same_model(messages: list[dict[str, Any]], batch: bool) -> None:
    history = _stored(_payloads(messages, batch))
    rendered = render_checked(history, model=MODEL)
    assert rendered.fragment == {"messages": native_messages(messages)}
    assert rendered.dropped == ()
    cached = render_checked(history, model=MODEL, system=[], summary="Summary so far.", cache=True)
    assert _strip(cached.fragment)["messages"] == rendered.fragment["messages"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_generated_conversations_served_to_another_model_drop_thinking_and_stay_valid(
    messages: list[dict[str, Any]],
) -> None:
    rendered = render_checked(_stored(messages), model="claude-opus-4-1", keep_images=False)
    text = json.dumps(rendered.fragment)
    assert '"thinking"' not in text
    assert "redacted_thinking" not in text
    thinking_messages = {
        f"m{i}"
        for i, m in enumerate(parse_all(messages), 1)
        if any(type(b).__name__ == "ReasoningBlock" for b in m.blocks)
    }
    assert {d.message_id for d in rendered.dropped if d.what == "reasoning"} == thinking_messages


_ids = st.text(alphabet="abc_-.:/ 9", min_size=1, max_size=10).filter(str.strip)


@st.composite
def chat_completions_histories(draw: st.DrawFn) -> list[StoredMessage]:
    """Chat Completions rows (no blocks), valid by the neutral rules, with odd ids and arguments."""
    out: list[StoredMessage] = []

    def add(role: str, content: Any = None, **kw: Any) -> None:
        out.append(
            StoredMessage(seq=len(out) + 1, epoch=0, message_id=f"c{len(out) + 1}", role=role, content=content, **kw)
        )

    for _ in range(draw(st.integers(1, 4))):
        for _ in range(draw(st.integers(1, 2))):
            add("user", draw(_cc_user))
        for _ in range(draw(st.integers(0, 2))):
            call_ids = draw(st.lists(_ids, min_size=1, max_size=3, unique=True))
            prefix = f"{len(out)}-"
            calls = tuple(
                {
                    "id": prefix + c,
                    "type": "function",
                    "function": {"name": "f", "arguments": compact_json(draw(_json))},
                }
                for c in call_ids
            )
            add("assistant", draw(st.none() | _words), tool_calls=calls, reasoning_content=draw(st.none() | _words))
            for c in calls:
                add("tool", draw(st.sampled_from(["", "ok", [{"type": "text", "text": "r"}]])), tool_call_id=c["id"])
        add("assistant", draw(_words))
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chat_completions_histories(), st.booleans())
def test_chat_completions_histories_render_valid_anthropic(history: list[StoredMessage], cache: bool) -> None:
    system = [StoredMessage(seq=0, epoch=0, message_id="s", role="system", content="Be kind.")]
    rendered = render_checked(history, model=MODEL, system=system, summary="Earlier: hello.", cache=cache)
    assert rendered.fragment["system"][-1]["text"] == "Earlier: hello."


def _turn(n: int) -> list[dict[str, Any]]:
    call = f"toolu_{n:03d}"
    return [
        {"role": "user", "content": f"question {n}"},
        {
            "role": "assistant",
            "model": MODEL,
            "content": [
                {"type": "thinking", "thinking": f"think {n}", "signature": f"sig{n}"},
                {"type": "tool_use", "id": call, "name": "lookup", "input": {"n": n}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": f"result {n}"}]},
        {"role": "assistant", "model": MODEL, "content": [{"type": "text", "text": f"answer {n}"}]},
    ]


def test_fifty_turns_only_append_to_the_rendered_messages() -> None:
    history: list[StoredMessage] = []
    system = [StoredMessage(seq=0, epoch=0, message_id="s", role="system", content="You help.")]
    previous: list[str] | None = None
    for n in range(50):
        history.extend(_stored_from(_turn(n), start=len(history)))
        first = render_checked(history, model=MODEL, system=system)
        again = render_checked(list(history), model=MODEL, system=system)
        assert compact_json(first.fragment) == compact_json(again.fragment)  # a pure function of its input
        serialised = [compact_json(m) for m in first.fragment["messages"]]
        if previous is not None:
            assert serialised[: len(previous)] == previous
            assert len(serialised) == len(previous) + 4
        previous = serialised


def _stored_from(payloads: list[Any], *, start: int) -> list[StoredMessage]:
    counter = iter(range(start + 1, start + 100))
    from events.formats.anthropic.parse import parse  # noqa: PLC0415 - local: ids continue the history's

    out = []
    for p in payloads:
        for m in parse(p, new_id=lambda: f"m{next(counter)}").messages:
            out.append(stored(m, start + len(out) + 1))
    return out
