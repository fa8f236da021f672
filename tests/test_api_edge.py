"""The edge of the API refuses bad input cleanly: 401 before anything else, then 422 naming the
field — never a 5xx, and never a record the read models cannot hold (issue 11, items 1-3, 6)."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import sys
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from convlog.runtime.serve import Service
from events.embedded_log import EmbeddedEventLog
from events.errors import InvalidEventError
from events.event_types import MessageAppended, SummaryRecorded
from events.keys import ConversationKey
from events.producer import ConversationProducer
from events.strict_json import parse_json
from events.validation import unstorable_char
from query_api.http import create_app

A = {"Authorization": "Bearer token-a"}
BASE = "/v1/users/u1/conversations"
KEY = ConversationKey("acme", "u1", "c1")
CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


# --- the Python producer API ---------------------------------------------------------------------


def _with_nul(path: str) -> tuple[dict[str, Any], str]:
    """A valid message with a NUL put into the string at ``path``, and the field to expect."""
    nul = "a\x00b"
    messages: dict[str, tuple[dict[str, Any], str]] = {
        "content": ({"role": "user", "content": nul}, "content"),
        "text part": ({"role": "user", "content": [{"type": "text", "text": nul}]}, "content[0].text"),
        "image url": (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/" + nul}}]},
            "content[0].url",
        ),
        "reasoning": ({"role": "assistant", "content": "x", "reasoning_content": nul}, "reasoning_content"),
        "metadata value": ({"role": "user", "content": "x", "metadata": {"k": nul}}, "metadata.k"),
        "metadata key": ({"role": "user", "content": "x", "metadata": {nul: "v"}}, "metadata"),
        "message_id": ({"role": "user", "content": "x", "message_id": nul}, "message_id"),
        "model": ({"role": "assistant", "content": "x", "model": nul}, "model"),
        "name": ({"role": "user", "content": "x", "name": nul}, "name"),
        "tool call id": ({"role": "assistant", "tool_calls": [{**CALL, "id": nul}]}, "tool_calls[0].id"),
        "tool arguments": (
            {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": '"' + nul + '"'}}]},
            "tool_calls[0].arguments",
        ),
        "tool arguments escaped": (
            {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": '"a\\u0000"'}}]},
            "tool_calls[0].arguments",
        ),
        "tool_call_id": ({"role": "tool", "content": "42", "tool_call_id": nul}, "tool_call_id"),
        "surrogate": ({"role": "user", "content": "a\ud800"}, "content"),
    }
    return messages[path]


NUL_CASES = [
    "content",
    "text part",
    "image url",
    "reasoning",
    "metadata value",
    "metadata key",
    "message_id",
    "model",
    "name",
    "tool call id",
    "tool arguments",
    "tool arguments escaped",
    "tool_call_id",
    "surrogate",
]


@pytest.mark.parametrize("case", NUL_CASES)
async def test_strings_postgres_cannot_store_are_refused_with_the_field(
    producer: ConversationProducer, log: EmbeddedEventLog, case: str
) -> None:
    message, field = _with_nul(case)
    before = await log.end_offsets()
    with pytest.raises(InvalidEventError) as info:
        await producer.append_message(KEY, message)
    assert info.value.field == field
    assert await log.end_offsets() == before


async def test_every_event_type_of_the_python_api_refuses_a_nul(producer: ConversationProducer) -> None:
    nul = "x\x00"
    calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("title", lambda: producer.start_conversation(KEY, title=nul)),
        ("metadata.k", lambda: producer.start_conversation(KEY, metadata={"k": nul})),
        ("reason", lambda: producer.redact(KEY, "m1", reason=nul)),
        ("reason", lambda: producer.clear(KEY, reason=nul)),
        ("reason", lambda: producer.erase(KEY, reason=nul)),
        ("event_id", lambda: producer.clear(KEY, event_id=nul)),
        ("content", lambda: producer.append_user(KEY, nul)),
        (
            "content[1].text",
            lambda: producer.append_system(KEY, [{"type": "text", "text": "ok"}, {"type": "text", "text": nul}]),
        ),
        (
            "tool_calls[0].name",
            lambda: producer.append_assistant(KEY, tool_calls=[{**CALL, "function": {"name": nul, "arguments": "{}"}}]),
        ),
    ]
    for field, call in calls:
        with pytest.raises(InvalidEventError) as info:
            await call()
        assert info.value.field == field, field
    summary = SummaryRecorded(
        summary_id="s1", text="sum\x00mary", covers_through_message_id="m1", model="m", prompt_version="v1"
    )
    with pytest.raises(InvalidEventError) as info:
        producer.build(KEY, summary)
    assert info.value.field == "text"
    message = MessageAppended(message_id="m", role="user", content="x")
    with pytest.raises(InvalidEventError) as info:  # the key refuses control characters itself
        producer.build(ConversationKey("acme", "u\ud800", "c"), message)
    assert info.value.field == "user_id"


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", '{"a": NaN}', "[1, -Infinity]"])
async def test_tool_call_arguments_are_strict_json(producer: ConversationProducer, constant: str) -> None:
    call = {**CALL, "function": {"name": "f", "arguments": constant}}
    with pytest.raises(InvalidEventError) as info:
        await producer.append_assistant(KEY, tool_calls=[call])
    assert info.value.field == "tool_calls[0].arguments"


async def test_parsed_arguments_are_serialised_strictly(producer: ConversationProducer) -> None:
    call = {**CALL, "function": {"name": "f", "arguments": {"x": math.nan}}}
    with pytest.raises(InvalidEventError) as info:
        await producer.append_assistant(KEY, tool_calls=[call])
    assert info.value.field == "tool_calls[0].function.arguments"


async def test_arguments_nested_too_deep_are_refused_not_raised(producer: ConversationProducer) -> None:
    deep = "[" * (sys.getrecursionlimit() * 2) + "]" * (sys.getrecursionlimit() * 2)
    call = {**CALL, "function": {"name": "f", "arguments": deep}}
    with pytest.raises(InvalidEventError) as info:
        await producer.append_assistant(KEY, tool_calls=[call])
    assert info.value.field == "tool_calls[0].arguments"


def test_strict_json_refuses_the_constants_and_keeps_json() -> None:
    assert parse_json('{"a": [1, 2.5, "x", null, true]}') == {"a": [1, 2.5, "x", None, True]}
    assert parse_json(b'{"a": 1}') == {"a": 1}
    for text in ("NaN", "Infinity", "-Infinity", '{"a": NaN}', "[" * 100_000, "1" * 5000):
        with pytest.raises(ValueError, match="JSON"):
            parse_json(text)


def test_strict_json_refuses_a_key_named_twice_and_text_not_in_utf8() -> None:
    """What parsers read two ways (RFC 8259 §4, §8.1); text read back from the log keeps the last value."""
    for text in ('{"a": 1, "a": 1}', '[{"b": {"a": 1, "a": 2}}]', b'{"a": 1, "a": 2}'):
        with pytest.raises(ValueError, match="the key 'a' appears twice"):
            parse_json(text)
    assert parse_json('{"a": 1, "a": 2}', stored=True) == {"a": 2}
    for encoding in ("utf-16", "utf-32", "utf-16-be", "utf-16-le", "utf-32-be", "utf-32-le"):
        with pytest.raises(ValueError, match="must be UTF-8"):
            parse_json('{"a": 1}'.encode(encoding))
    assert parse_json('{"a": "é"}'.encode("utf-8-sig")) == {"a": "é"}  # §8.1: a parser may ignore the BOM


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "user", "content": "x", "message_id": 5}, "message_id"),
        ({"role": "user", "content": "x", "message_id": 0}, "message_id"),
        ({"role": "user", "content": "x", "message_id": []}, "message_id"),
        ({"role": "user", "content": "x", "message_id": {"a": 1}}, "message_id"),
        ({"role": "user", "content": "x", "message_id": ""}, "message_id"),
        ({"role": "assistant", "content": "x", "usage": {"prompt_tokens_details": "x"}}, "usage.prompt_tokens_details"),
        ({"role": "assistant", "content": "x", "usage": {"prompt_tokens_details": [1]}}, "usage.prompt_tokens_details"),
        (
            {"role": "assistant", "content": "x", "usage": {"completion_tokens_details": 7}},
            "usage.completion_tokens_details",
        ),
        (
            {"role": "assistant", "content": "x", "usage": {"prompt_tokens_details": {"cached_tokens": "x"}}},
            "usage.cached_tokens",
        ),
        ({"role": "assistant", "content": "x", "usage": {"prompt_tokens": 2**63}}, "usage.prompt_tokens"),
        ({"role": "assistant", "content": "x", "thinking_duration_ms": 2**64}, "thinking_duration_ms"),
        ({"role": "assistant", "content": "x", "thinking_duration_ms": 1.5}, "thinking_duration_ms"),
        ({"role": "user", "content": "x", "metadata": []}, "metadata"),
        ({"role": "user", "content": "x", "metadata": "k=v"}, "metadata"),
        ({"role": "user", "content": "x", "metadata": {"k": 1}}, "metadata.k"),
        ({"role": "assistant", "content": "x", "tool_calls": {}}, "tool_calls"),
        ({"role": "assistant", "content": "x", "tool_calls": ""}, "tool_calls"),
        ({"role": "assistant", "content": "x", "tool_calls": 0}, "tool_calls"),
        ({"role": "assistant", "content": "x", "tool_calls": [{**CALL, "id": 5}]}, "tool_calls[0].id"),
        ({"role": "user", "content": {"text": "x"}}, "content"),
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": 5}}]}, "content[0].image_url.url"),
        ({"role": "user", "content": [{"type": ["text"]}]}, "content[0].type"),
        ({"role": ["user"], "content": "x"}, "role"),
        ({"role": "assistant", "content": "x", "finish_reason": {"a": 1}}, "finish_reason"),
        ({"role": "user", "content": "x", "name": 5}, "name"),
        ({"role": "tool", "content": "x", "tool_call_id": 5}, "tool_call_id"),
    ],
)
async def test_every_field_of_a_message_is_type_checked(
    producer: ConversationProducer, message: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidEventError) as info:
        await producer.append_message(KEY, message)
    assert info.value.field == field


async def test_python_api_ids_of_the_wrong_type_are_invalid_events(producer: ConversationProducer) -> None:
    cases: list[tuple[dict[str, Any], str]] = [({"message_id": 5}, "message_id"), ({"event_id": 5}, "event_id")]
    for kwargs, field in cases:
        with pytest.raises(InvalidEventError) as info:
            await producer.append_user(KEY, "x", **kwargs)
        assert info.value.field == field


# --- what Postgres refuses, checked against the real thing ---------------------------------------

_SURROGATES = range(0xD800, 0xE000)


def _storable_code_points() -> Iterator[str]:
    for start in range(1, sys.maxunicode + 1, 0x10000):  # one plane per chunk
        yield "".join(chr(c) for c in range(start, min(start + 0x10000, sys.maxunicode + 1)) if c not in _SURROGATES)


@pytest.mark.postgres
async def test_the_refused_characters_are_exactly_what_postgres_cannot_store(pg_admin_url: str) -> None:
    """Every code point a Python str can hold, in text, in a jsonb string, as a jsonb key and
    as the \\u escape json.dumps writes: Postgres stores all of them but U+0000 (and lone
    surrogates, which cannot even be encoded to UTF-8), and validation refuses exactly those."""
    async with await psycopg.AsyncConnection.connect(pg_admin_url, autocommit=True) as conn:
        assert (await (await conn.execute("SHOW server_encoding")).fetchone()) == ("UTF8",)
        for chunk in _storable_code_points():
            assert unstorable_char(chunk) is None
            row = await (
                await conn.execute(
                    "SELECT %s::text, %s::jsonb, %s::jsonb, %s::jsonb",
                    (
                        chunk,
                        Jsonb({chunk: chunk}),
                        json.dumps([chunk]),
                        json.dumps([chunk], ensure_ascii=False),
                    ),
                )
            ).fetchone()
            assert row == (chunk, {chunk: chunk}, [chunk], [chunk])
        for refused in ("\x00", "a\x00b"):
            assert unstorable_char(refused) == "\x00"
            for statement, value in (
                ("SELECT %s::text", refused),
                ("SELECT %s::jsonb", Jsonb([refused])),
                ("SELECT %s::jsonb", Jsonb({refused: 1})),
                ("SELECT %s::jsonb", json.dumps([refused])),  # the escape \u0000, not the character
                ("SELECT %s::jsonb", '["\\ud800"]'),  # an escaped lone surrogate, as arguments may hold
            ):
                with pytest.raises(psycopg.DataError):
                    await conn.execute(statement, (value,))
    for c in (0xD800, 0xDBFF, 0xDC00, 0xDFFF):
        with pytest.raises(UnicodeEncodeError):
            chr(c).encode()
        assert unstorable_char(f"a{chr(c)}") == chr(c)


# --- the HTTP API --------------------------------------------------------------------------------


@pytest.fixture
async def no_wait_http_client(api_service: Service) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the API that does not wait for offsets nobody writes: the fuzz test asks for random ones."""
    impatient = replace(api_service.deps.queries, wait_for_offset_s=0.0)
    transport = httpx.ASGITransport(app=create_app(replace(api_service.deps, queries=impatient)))
    async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as c:
        yield c


@pytest.mark.postgres
async def test_http_refuses_unstorable_strings_and_the_projector_keeps_going(
    no_wait_http_client: httpx.AsyncClient,
) -> None:
    for case in NUL_CASES:
        message, field = _with_nul(case)
        if case == "surrogate":
            continue  # JSON text cannot carry a lone surrogate as a character, only as an escape
        response = await no_wait_http_client.post(f"{BASE}/c/messages", json=message, headers=A)
        assert response.status_code == 422, (case, response.text)
        error = response.json()["error"]
        assert (error["code"], error["field"]) == ("invalid_event", field)
    escaped = '{"role": "user", "content": "a\\ud800b"}'  # a lone surrogate, as JSON can write one
    response = await no_wait_http_client.post(
        f"{BASE}/c/messages", content=escaped, headers={**A, "Content-Type": "application/json"}
    )
    assert (response.status_code, response.json()["error"]["field"]) == (422, "content")
    ok = await no_wait_http_client.post(f"{BASE}/c/messages", json={"role": "user", "content": "still here"}, headers=A)
    assert ok.status_code == 202
    context = await no_wait_http_client.get(
        f"{BASE}/c/context",
        headers=A,
        params={"model": "gpt-4o", "budget_tokens": 500, "min_offset": ok.json()["offset"]},
    )
    for _ in range(200):  # read-your-writes: the projector applied it (this app does not wait)
        if context.status_code == 200:
            break
        await asyncio.sleep(0.05)
        context = await no_wait_http_client.get(context.request.url, headers=A)
    assert context.status_code == 200, context.text
    assert [m["content"] for m in context.json()["messages"]] == ["still here"]


@pytest.mark.postgres
@pytest.mark.parametrize(
    "raw",
    [
        '{"role": "user", "content": "x", "extra": NaN}',
        '{"role": "user", "content": "x", "usage": {"prompt_tokens": Infinity}}',
        '{"role": "user", "content": "x"',
        "[" * 100_000,
        '{"role": "user", "content": "x", "n": ' + "1" * 5000 + "}",
        b'{"role": "user", "content": "\xff"}',
    ],
)
async def test_http_bodies_are_strict_json(no_wait_http_client: httpx.AsyncClient, raw: str | bytes) -> None:
    response = await no_wait_http_client.post(
        f"{BASE}/c/messages", content=raw, headers={**A, "Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_json"
    assert response.json()["error"]["field"] == "body"


@pytest.mark.postgres
async def test_http_type_checks_name_the_field(no_wait_http_client: httpx.AsyncClient) -> None:
    for body, field in (
        ({"role": "user", "content": "x", "message_id": 5}, "message_id"),
        ({"role": "assistant", "content": "x", "usage": {"prompt_tokens_details": "x"}}, "usage.prompt_tokens_details"),
        (
            {"role": "assistant", "content": "x", "usage": {"completion_tokens_details": [1]}},
            "usage.completion_tokens_details",
        ),
        (
            {"role": "assistant", "tool_calls": [{**CALL, "function": {"name": "f", "arguments": "NaN"}}]},
            "tool_calls[0].arguments",
        ),
    ):
        response = await no_wait_http_client.post(f"{BASE}/c/messages", json=body, headers=A)
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == field


@pytest.mark.postgres
async def test_ids_that_are_not_utf8_are_422_never_one_conversation(no_wait_http_client: httpx.AsyncClient) -> None:
    """``a%FFb``, ``a%FEb`` and a lone surrogate (``%ED%A0%80``) were all decoded to the
    conversation ``a\ufffdb``: refused, naming the id; the UTF-8 of U+FFFD itself still names it."""
    posted = await no_wait_http_client.post(
        f"{BASE}/a%EF%BF%BDb/messages", json={"role": "user", "content": "x"}, headers=A
    )
    assert posted.status_code == 202, posted.text
    for path, field in (
        (f"{BASE}/a%FFb/messages", "conversation_id"),
        (f"{BASE}/a%FEb/messages", "conversation_id"),
        (f"{BASE}/a%ED%A0%80b/messages", "conversation_id"),
        ("/v1/users/u%FF/conversations/c/messages", "user_id"),
    ):
        response = await no_wait_http_client.post(path, json={"role": "user", "content": "y"}, headers=A)
        assert (response.status_code, response.json()["error"]["code"]) == (422, "invalid_request"), path
        assert response.json()["error"]["field"] == field
    for path in (f"{BASE}/a%FFb/context?model=gpt-4o&budget_tokens=100", f"{BASE}/a%FEb/events"):
        response = await no_wait_http_client.get(path, headers=A)
        assert (response.status_code, response.json()["error"]["field"]) == (422, "conversation_id"), path
    refused = await no_wait_http_client.get(
        f"{BASE}/c/context?model=gpt-4o&budget_tokens=100&before_message=m%FF", headers=A
    )
    assert (refused.status_code, refused.json()["error"]["field"]) == (422, "before_message")
    unauthenticated = await no_wait_http_client.post(f"{BASE}/a%FFb/messages", json={"role": "user", "content": "y"})
    assert unauthenticated.status_code == 401  # authentication still first
    events = await no_wait_http_client.get(f"{BASE}/a%EF%BF%BDb/events", headers=A)
    assert events.status_code == 200, events.text
    assert len(events.json()["events"]) == 1  # only the message sent to it


@pytest.mark.postgres
async def test_a_user_id_a_record_key_cannot_carry_is_refused_by_the_user_erase_too(
    no_wait_http_client: httpx.AsyncClient,
) -> None:
    """``DELETE /v1/users/%00`` reached Postgres with the NUL (a 500): refused as an append is."""
    for user_id in ("%00", "%20", "u%0A"):
        appended = await no_wait_http_client.post(
            f"/v1/users/{user_id}/conversations/c/messages", json={"role": "user", "content": "x"}, headers=A
        )
        erased = await no_wait_http_client.delete(f"/v1/users/{user_id}", headers=A)
        assert erased.status_code == appended.status_code == 422, (user_id, erased.text)
        assert erased.json()["error"]["field"] == appended.json()["error"]["field"] == "user_id"


# --- authentication comes first ------------------------------------------------------------------

PUBLIC = ("/healthz", "/readyz", "/metrics", "/openapi.json")


@pytest.mark.postgres
async def test_without_a_token_nothing_but_401_and_the_body_is_never_read(
    no_wait_http_client: httpx.AsyncClient,
) -> None:
    read: list[bytes] = []

    async def body() -> AsyncIterator[bytes]:
        read.append(b"x")
        yield b'{"role": "user", "content": "x"}'

    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "token-a"}, {"Authorization": "Bearer "}):
        for method, path, content in (
            ("POST", f"{BASE}/c/messages", b"[1, 2, 3]"),  # a bad body: 422 with a token
            ("POST", f"{BASE}/c/messages", b"{not json"),
            ("POST", f"{BASE}/c/messages", b"x" * (3 * 1024 * 1024)),  # too large: 413 with a token
            ("POST", f"{BASE}/c/messages", body()),
            ("GET", f"{BASE}/c/context?budget_tokens=-1", None),  # bad query: 422 with a token
            ("GET", "/v1/no/such/route", None),
            ("POST", f"{BASE}/c/clear", None),
        ):
            response = await no_wait_http_client.request(method, path, content=content, headers=headers)
            assert response.status_code == 401, (method, path, headers, response.text)
            assert response.json()["error"]["code"] == "unauthorized"
    assert read == []  # the streamed body was never asked for


@pytest.mark.postgres
async def test_health_readiness_metrics_and_the_schema_need_no_token(no_wait_http_client: httpx.AsyncClient) -> None:
    for path in PUBLIC:
        response = await no_wait_http_client.get(path)
        allowed = (200, 503) if path == "/readyz" else (200,)  # /readyz: 503 until caught up
        assert response.status_code in allowed, (path, response.text)
        assert response.status_code != 401
    assert (await no_wait_http_client.get("/healthz")).json() == {"status": "ok"}
    metrics = (await no_wait_http_client.get("/metrics")).text
    assert 'status="401"' not in metrics  # nothing was refused yet
    assert (await no_wait_http_client.get(f"{BASE}/c/messages")).status_code == 401
    assert 'status="401"' in (await no_wait_http_client.get("/metrics")).text  # refusals are still counted


# --- fuzzing every endpoint of the schema --------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(["", "a\x00b", "gpt-4o", "0", "-1"])


# Valid messages of every shape; the fuzzer replaces some of their values (at any depth) with
# anything JSON can say, so the deep checks are reached and not only the first one.
_VALID_MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief", "name": "ops"},
    {"role": "user", "content": "hi", "metadata": {"k": "v"}, "message_id": "m-1"},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "low"}},
        ],
    },
    {
        "role": "assistant",
        "content": "ok",
        "model": "gpt-4o",
        "finish_reason": "stop",
        "reasoning_content": "r",
        "thinking_duration_ms": 12,
        "usage": {
            "prompt_tokens": 10,
            "completion_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 1},
            "completion_tokens_details": {"reasoning_tokens": 1},
        },
    },
    {
        "role": "assistant",
        "tool_calls": [
            CALL,
            {"id": "call_2", "type": "function", "function": {"name": "f", "arguments": {"a": [1, "b"]}}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    {"role": "assistant", "content": "cut", "finish_reason": "interrupted", "tool_calls": [CALL]},
]


def _paths(value: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every place in a JSON value: its keys and indexes at any depth, and the value itself."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _put(doc: Any, path: tuple[str | int, ...], value: Any) -> Any:
    if not path:
        return value
    copy = dict(doc) if isinstance(doc, dict) else list(doc)
    copy[path[0]] = _put(copy[path[0]], path[1:], value)  # type: ignore[index]
    return copy


@st.composite
def _messages(draw: st.DrawFn) -> dict[str, Any]:
    message: Any = draw(st.sampled_from(_VALID_MESSAGES))
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(_paths(message)[1:]))  # not the whole message: that is _JSON below
        message = _put(message, where, draw(_JSON | _TEXT))
    if draw(st.booleans()):
        message = {**message, draw(st.sampled_from([*_FIELDS, "refusal", "audio"])): draw(_JSON | _TEXT)}
    return dict(message)


_FIELDS = (
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "reasoning_content",
    "thinking_duration_ms",
    "model",
    "usage",
    "finish_reason",
    "metadata",
    "message_id",
)
_ODD_BODY = st.one_of(
    _JSON.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=40),
    st.sampled_from([b"NaN", b'{"role": "user", "content": Infinity}', b"", b"[" * 5000, b'{"role": "user"']),
)
_CONTENT_TYPES = ["application/json", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]


# Native payloads of each format (the appends' format is drawn apart from the body).
_NATIVE_MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"q": {"r": 1}}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    {"type": "function_call_output", "call_id": "c1", "output": "x"},
    {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"q": 1}}}]},
]


def _twice(doc: Any, where: tuple[str | int, ...], value: Any) -> str:
    """JSON text of ``doc`` whose object at ``where`` names its first key twice, first with ``value``."""
    if isinstance(doc, dict):
        items = [
            f"{json.dumps(k)}: {_twice(v, where[1:], value) if where and k == where[0] else json.dumps(v)}"
            for k, v in doc.items()
        ]
        if not where:
            items.insert(0, f"{json.dumps(next(iter(doc)))}: {json.dumps(value)}")
        return "{" + ", ".join(items) + "}"
    if isinstance(doc, list):
        return (
            "["
            + ", ".join(
                _twice(v, where[1:], value) if where and i == where[0] else json.dumps(v) for i, v in enumerate(doc)
            )
            + "]"
        )
    return json.dumps(doc)


@st.composite
def _named_twice(draw: st.DrawFn) -> bytes:
    """A message (Chat Completions or native) with one of its objects, at any depth, naming a key twice."""
    message = draw(_messages() | st.sampled_from(_NATIVE_MESSAGES))
    objects = [p for p in _paths(message) if isinstance(_get(message, p), dict) and _get(message, p)]
    return _twice(message, draw(st.sampled_from(objects)), draw(_JSON | _TEXT)).encode()


def _get(doc: Any, path: tuple[str | int, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


_NOT_UTF8 = st.sampled_from(["utf-16", "utf-32", "utf-16-le", "utf-32-be"])  # with a BOM and without
_AMBIGUOUS_BODY = st.one_of(  # what parsers read two ways (issue 23, item 4): never accepted
    _named_twice(),
    st.builds(lambda m, e: json.dumps(m).encode(e), _messages() | st.sampled_from(_NATIVE_MESSAGES), _NOT_UTF8),
)


def _ambiguous(body: bytes) -> bool:
    """Whether parsers may read ``body`` two ways: not UTF-8, or an object naming a key twice."""
    if json.detect_encoding(body) not in ("utf-8", "utf-8-sig"):
        return True
    twice = False

    def pairs(p: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal twice
        twice = twice or len(dict(p)) < len(p)
        return dict(p)

    try:
        json.loads(body, object_pairs_hook=pairs)
    except (ValueError, RecursionError):
        return False
    return twice


_BODY = st.one_of(  # (body, content type): mostly messages as JSON, the bodies the API reads
    st.tuples(_messages().map(lambda m: json.dumps(m).encode()), st.just("application/json")),
    st.tuples(_messages().map(lambda m: json.dumps(m).encode()), st.just("application/json")),
    st.tuples(st.lists(_messages(), max_size=4).map(lambda m: json.dumps(m).encode()), st.just("application/json")),
    st.tuples(_ODD_BODY, st.sampled_from(_CONTENT_TYPES)),
    st.tuples(_AMBIGUOUS_BODY, st.just("application/json")),
)


def _query_value(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    """A value of the parameter's declared type (often in range), or any text at all."""
    schema = next((s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"), schema)
    if "enum" in schema:
        valid: st.SearchStrategy[str] = st.sampled_from(schema["enum"])
    elif schema.get("type") == "integer":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1))
        valid = st.integers(low, schema.get("maximum", 10**6)).map(str)
    else:
        valid = st.sampled_from(["gpt-4o", "claude-3-5-sonnet", "m1"])
    return valid | _TEXT | _JSON.map(json.dumps)


Operation = tuple[str, str, list[str], dict[str, tuple[bool, dict[str, Any]]]]


def _operations(spec: dict[str, Any]) -> list[Operation]:
    """(method, path template, path params, query params: (required, schema)) of every operation."""
    out = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            params = op.get("parameters", [])
            names = [p["name"] for p in params if p["in"] == "path"]
            query = {p["name"]: (p.get("required", False), p["schema"]) for p in params if p["in"] == "query"}
            out.append((method.upper(), path, names, query))
    return sorted(out)


@pytest.fixture
async def operations(no_wait_http_client: httpx.AsyncClient) -> list[Operation]:
    """Every operation of the app's OpenAPI schema, and a conversation the token's tenant has."""
    client = no_wait_http_client
    known = await client.post(f"{BASE}/c/messages", json={"role": "user", "content": "known conversation"}, headers=A)
    assert known.status_code == 202, known.text
    return _operations((await client.get("/openapi.json")).json())


def _segment(value: str) -> str:
    return urllib.parse.quote(value, safe="") or "x"


_IDEMPOTENCY_KEY = st.text(st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=140)


@pytest.mark.postgres
@settings(
    max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], derandomize=True
)
@given(data=st.data())
async def test_fuzzed_requests_on_every_endpoint_never_get_a_5xx(
    no_wait_http_client: httpx.AsyncClient, operations: list[Operation], data: st.DataObject
) -> None:
    """Every operation the schema lists, with path, query, headers and body drawn from their
    declared types and from anything at all; appends (the richest input) are drawn most."""
    assert len(operations) >= 10  # every route of the schema, the public ones included
    appends = [op for op in operations if op[0] == "POST" and op[1].endswith("/messages")]
    method, template, names, query = data.draw(st.sampled_from(operations) | st.sampled_from(appends), label="op")
    path = template
    for name in names:
        path = path.replace("{" + name + "}", _segment(data.draw(st.sampled_from(["u1", "c"]) | _TEXT, label=name)))
    params = {}
    for name, (required, schema) in query.items():
        if required or data.draw(st.booleans(), label=f"give {name}"):
            params[name] = data.draw(_query_value(schema), label=name)
    headers: dict[str, Any] = dict(A)  # without a token everything is a 401: the test below
    body = None
    if method == "POST":
        body, headers["Content-Type"] = data.draw(_BODY, label="body")
        if data.draw(st.booleans(), label="give an idempotency key"):
            headers["Idempotency-Key"] = data.draw(_IDEMPOTENCY_KEY, label="key").encode("latin-1")
    response = await no_wait_http_client.request(method, path, params=params, content=body, headers=headers)
    assert response.status_code != 500, (method, path, params, body, response.text)
    if body is not None and template.endswith(("/messages", "/redact")) and _ambiguous(body):
        assert response.status_code >= 400, (method, path, params, body, response.text)
    if response.status_code > 500:  # only an availability answer, never for the input
        assert path == "/readyz" or response.json()["error"]["code"] == "not_caught_up", response.text


@pytest.mark.postgres
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], derandomize=True
)
@given(data=st.data())
async def test_fuzzed_requests_without_a_valid_token_are_all_401(
    no_wait_http_client: httpx.AsyncClient, operations: list[Operation], data: st.DataObject
) -> None:
    method, template, names, _ = data.draw(st.sampled_from(operations), label="op")
    path = template
    for name in names:
        path = path.replace("{" + name + "}", _segment(data.draw(_TEXT, label=name)))
    headers = dict(
        data.draw(
            st.sampled_from(
                [
                    {},
                    {"Authorization": "Bearer x"},
                    {"Authorization": "token-a"},
                    {"Authorization": "Basic dG9rZW4tYQ=="},
                ]
            ),
            label="auth",
        )
    )
    body, headers["Content-Type"] = data.draw(_BODY, label="body")
    response = await no_wait_http_client.request(
        method, path, content=body if method == "POST" else None, headers=headers
    )
    if template in PUBLIC:
        assert response.status_code in ((200, 503) if template == "/readyz" else (200,)), response.text
    else:
        assert (response.status_code, response.json()["error"]["code"]) == (401, "unauthorized"), response.text


@pytest.mark.postgres
@pytest.mark.parametrize("conversation_id", ["a\x00b", "a\ud800b"])
async def test_a_crafted_list_cursor_is_a_422_not_a_500(
    no_wait_http_client: httpx.AsyncClient, conversation_id: str
) -> None:
    raw = json.dumps([None, conversation_id]).encode()  # ASCII escapes: valid UTF-8 whatever it says
    cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    response = await no_wait_http_client.get(BASE, params={"before": cursor}, headers=A)
    assert response.status_code == 422, response.text


@pytest.mark.postgres
async def test_a_min_offset_the_log_does_not_hold_is_a_422_at_once(no_wait_http_client: httpx.AsyncClient) -> None:
    appended = await no_wait_http_client.post(f"{BASE}/c/messages", json={"role": "user", "content": "hi"}, headers=A)
    assert appended.status_code == 202, appended.text
    params = {"model": "gpt-4o", "budget_tokens": 1000, "min_offset": appended.json()["offset"] + 10**9}
    started = asyncio.get_running_loop().time()
    response = await no_wait_http_client.get(f"{BASE}/c/context", params=params, headers=A)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "offset_beyond_log_end"
    assert asyncio.get_running_loop().time() - started < 1.0  # not the whole wait for read-your-writes


@pytest.mark.postgres
async def test_an_as_of_the_log_does_not_hold_is_the_422_min_offset_is(no_wait_http_client: httpx.AsyncClient) -> None:
    """One rule for both: no context "after" an event the log does not hold (the last one was 200)."""
    appended = await no_wait_http_client.post(f"{BASE}/c/messages", json={"role": "user", "content": "hi"}, headers=A)
    assert appended.status_code == 202, appended.text
    offset = appended.json()["offset"]
    base = {"model": "gpt-4o", "budget_tokens": 1000}
    for name in ("as_of", "min_offset"):
        response = await no_wait_http_client.get(f"{BASE}/c/context", params={**base, name: offset + 10**9}, headers=A)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert (error["code"], error["field"]) == ("offset_beyond_log_end", name)
        assert error["partition"] == appended.json()["partition"]
    response = await no_wait_http_client.get(f"{BASE}/c/context", params={**base, "as_of": offset}, headers=A)
    assert response.status_code == 200, response.text


@pytest.mark.postgres
async def test_a_reserve_that_takes_the_whole_budget_is_a_422_that_says_so(
    no_wait_http_client: httpx.AsyncClient,
) -> None:
    appended = await no_wait_http_client.post(f"{BASE}/c/messages", json={"role": "user", "content": "hi"}, headers=A)
    assert appended.status_code == 202, appended.text
    for extra in ({"as_of": appended.json()["offset"]}, {}):  # rebuilt or live, the same answer
        params = {"model": "gpt-4o", "budget_tokens": 100, "reserve_tokens": 150, "tools_tokens": 50, **extra}
        response = await no_wait_http_client.get(f"{BASE}/c/context", params=params, headers=A)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert (error["code"], error["field"]) == ("reserve_exceeds_budget", "reserve_tokens")
        assert error["message"] == (
            "reserve_tokens (150) and tools_tokens (50) leave none of budget_tokens (100) for the messages"
        )


@pytest.mark.postgres
async def test_an_unknown_format_is_one_code_on_a_read_and_an_append(no_wait_http_client: httpx.AsyncClient) -> None:
    message = {"role": "user", "content": "hi"}
    appended = await no_wait_http_client.post(
        f"{BASE}/c/messages", params={"format": "klingon"}, json=message, headers=A
    )
    params = {"model": "gpt-4o", "budget_tokens": 100, "format": "klingon"}
    read = await no_wait_http_client.get(f"{BASE}/c/context", params=params, headers=A)
    for response in (appended, read):
        assert response.status_code == 422, response.text
        assert (response.json()["error"]["code"], response.json()["error"]["field"]) == ("unknown_format", "format")
