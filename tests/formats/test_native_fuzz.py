"""Every native payload convlog accepts is servable in every format, by construction: the providers'
documented payloads with values replaced anywhere by anything JSON can say — wrong types, nesting
past the limit, nulls — are either refused at the edge or give a context in all four formats
that passes the format's rules, that orjson encodes, and that leaves none of them out as
``unservable`` (issue 23, items 2 and 3). (Not the SDKs' types: what is inside a key convlog
keeps opaque — an annotation, a future item — goes back as it came, by design.)

Two levels: the parser and producer alone (many examples, no server), and the HTTP API with a
projector beside it (random valid and invalid payloads appended to one conversation, which
stays servable after each: never a 5xx)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, cast

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.errors import InvalidEventError
from events.event_types import MessageAppended
from events.keys import ConversationKey
from events.log import EventLog
from events.producer import ConversationProducer
from events.servable import MAX_NESTING
from projectors.tokens import model_spec
from query_api.context import assemble
from query_api.context_types import ContextBudgetExceededError, ContextRequest
from query_api.http.fast_json import FastJSONResponse
from tests.formats.every_format import TARGETS, count, stored
from tests.test_api_edge import _JSON, _paths, _put
from tests.test_api_in_memory import deps, in_memory_client

__all__ = ["deps", "in_memory_client"]  # the fixtures (the API over the in-memory read models, a projector beside it)

A = {"Authorization": "Bearer token-a"}
BASE = "/v1/users/u1/conversations"
FIXTURES = Path(__file__).parent.parent / "fixtures" / "formats"
KEY = ConversationKey("acme", "u1", "fuzz")


def _seeds() -> list[tuple[str, Any]]:
    """Every documented payload of the fixtures, one by one and as the whole list."""
    out: list[tuple[str, Any]] = []
    for fmt in ("anthropic", "responses", "gemini"):
        for path in sorted((FIXTURES / fmt).glob("*.json")):
            doc = json.loads(path.read_text())
            if "response" in doc:  # a whole response (Responses, Gemini)
                out.append((fmt, doc["response"]))
            payloads = doc.get("payloads") or doc.get("items") or doc.get("contents") or []
            out += [(fmt, p) for p in payloads]
            if payloads:
                out.append((fmt, payloads))
    return out


SEEDS = _seeds()


def _deep(depth: int) -> Any:
    value: Any = "x"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


# What a careless or hostile client puts in place of a value: anything JSON can say, nesting
# at and past the limit, and the values of another key's type.
_VALUE = st.one_of(
    _JSON,
    st.sampled_from([None, 5, -3, "3", "", True, [], {}, [5], {"type": None}, {"type": 5}]),
    st.integers(MAX_NESTING - 4, MAX_NESTING + 4).map(_deep),
)


@st.composite
def _payloads(draw: st.DrawFn) -> tuple[str, Any]:
    fmt, payload = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(_paths(payload)))
        payload = _put(payload, where, draw(_VALUE))
    return fmt, payload


# What issue 23 found accepted and then unservable (or a 500 on the append itself).
_FOUND = [
    ("responses", {"type": None, "role": "user", "content": "hi"}),
    (
        "anthropic",
        [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": _deep(958)}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
        ],
    ),
    (
        "gemini",
        [
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": _deep(961)}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]},
        ],
    ),
    ("anthropic", {"role": "user", "content": [{"type": "image", "source": 5}]}),
    (
        "responses",
        [{"type": "reasoning", "id": "rs_1", "summary": [5]}, {"type": "message", "role": "assistant", "content": "x"}],
    ),
]


_CONVERSATIONS = itertools.count()

# build_native parses, validates and encodes: it never touches the log.
_PRODUCER = ConversationProducer(cast("EventLog", None), producer="fuzz")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(drawn=_payloads())
def test_every_accepted_native_payload_is_servable_in_every_format(drawn: tuple[str, Any]) -> None:
    fmt, payload = drawn
    try:
        batch = _PRODUCER.build_native(KEY, fmt, payload)
    except InvalidEventError:
        return  # refused at the edge, with its code and path
    parsed = [e.body for e in batch.events if isinstance(e.body, MessageAppended)]
    history = [
        MessageAppended(message_id="q", role="user", content="question"),
        *parsed,
        MessageAppended(message_id="now", role="user", content="the question now"),
    ]
    messages = [stored(m, i) for i, m in enumerate(history)]
    for target, model in TARGETS:
        request = ContextRequest(model, 1_000_000, format=target)  # type: ignore[arg-type]
        try:
            ctx = assemble(
                system=[], summary=None, messages=messages, request=request, spec=model_spec(model), count=count
            )
        except ContextBudgetExceededError:
            continue
        assert not [d for d in ctx.dropped if d.reason == "unservable"], (target, payload, ctx.dropped)
        FastJSONResponse(ctx.fragment)  # the API's encoder of the body (orjson, the standard library past 64 bits)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(appended=st.lists(_payloads() | st.sampled_from(_FOUND), min_size=1, max_size=6))
async def test_a_conversation_stays_servable_whatever_is_appended_to_it(
    in_memory_client: httpx.AsyncClient, appended: list[tuple[str, Any]]
) -> None:
    """Random valid and invalid native payloads appended over HTTP: never a 5xx; after each, the
    conversation's context in every format is a 200 with nothing left out as unservable."""
    conversation = f"{BASE}/fuzz-{next(_CONVERSATIONS)}"
    first = await in_memory_client.post(f"{conversation}/messages", json={"role": "user", "content": "q"}, headers=A)
    assert first.status_code == 202, first.text
    offset = first.json()["offset"]
    for fmt, payload in appended:
        body = json.dumps(payload).encode()  # as a client's JSON library writes it (Infinity too: refused)
        r = await in_memory_client.post(
            f"{conversation}/messages",
            params={"format": fmt},
            content=body,
            headers={**A, "Content-Type": "application/json"},
        )
        assert r.status_code < 500, (fmt, payload, r.text)
        if r.status_code == 202:
            offset = r.json()["offset"]
        for target, model in TARGETS:
            params = {"model": model, "budget_tokens": 1_000_000, "format": target, "min_offset": offset}
            ctx = await in_memory_client.get(f"{conversation}/context", params=params, headers=A)
            assert ctx.status_code == 200, (target, payload, ctx.text)
            unservable = [d for d in ctx.json()["dropped"] if d["reason"] == "unservable"]
            assert not unservable, (target, payload, unservable)
