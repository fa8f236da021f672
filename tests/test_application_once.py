"""Event application is decided once (projectors/state.py): the context served from the live
read models at a conversation's last offset is, byte for byte, the context ``as_of`` rebuilds
from the log at that offset — for random histories of messages, tool groups, interrupted
streams, redactions, clears, erases (conditional ones that apply and ones that are void),
summaries (listing the redactions they left out or not) and duplicated events, for every
reasoning policy and several budgets. Embedded log, real Postgres, the projector in-process.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from convlog.runtime.serve import Service
from events.blocks import TextBlock, native_message
from events.embedded_log import EmbeddedEventLog
from events.event_types import MessageAppended, SummaryRecorded
from events.keys import ConversationKey
from events.producer import Appended, ConversationProducer
from pgstore.reads import PostgresReadModels
from pgstore.versions import compare, json_forms_differ
from projectors.tokens import DEFAULT_COUNTED, ENCODINGS, TokenCounter, model_spec
from projectors.window import WindowPolicy
from query_api.as_of import context_inputs_as_of
from query_api.context_types import ContextBudgetExceededError, ContextRequest, StoredMessage
from query_api.live import assemble_live, ranges
from query_api.ports import ContextInputs
from query_api.served import context_as_of, context_body
from tests.native_support import thinking_answer, tool_result
from tests.projection_support import Projection, project_all

# One service for every example (each example is a conversation of its own); no summarizer: the
# examples record their own summaries.
pytestmark = [pytest.mark.postgres, pytest.mark.service_settings(partitions=2, api_tokens="acme:token-a")]

A = {"Authorization": "Bearer token-a"}
POLICIES = ("omit", "tool_turns", "all")
BUDGETS = (200, 1000, 8000)  # one that often cannot fit (an image costs ~765), one that trims, one for all


words = st.text(alphabet="abcdefghij klmnop", min_size=1, max_size=30)
# Content as a string or as parts: the parts' key order is what a jsonb column used to change.
contents = st.one_of(
    words,
    st.lists(
        st.one_of(
            words.map(lambda t: {"type": "text", "text": t}),
            st.just({"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}),
        ),
        min_size=1,
        max_size=3,
    ),
)
replies = st.one_of(
    st.tuples(st.just("assistant"), words, st.booleans()),  # with reasoning or not
    st.tuples(st.just("tools"), st.integers(1, 3), st.integers(0, 3)),  # calls made, calls answered
    st.tuples(st.just("interrupted"), words, st.booleans()),  # with a half-made tool call or not
    st.tuples(st.just("stray_tool"), words),  # answers no call: kept for audit, never served
    # Schema v4, appended natively: thinking (signed, redacted, encrypted), an opaque block, text,
    # calls made and answered (the last answer an error), or interrupted.
    st.tuples(st.just("native"), words, st.integers(0, 3), st.integers(0, 3), st.booleans()),
)
events = st.one_of(
    st.tuples(st.just("redact"), st.integers(0, 1000)),
    st.tuples(st.just("summary"), st.integers(0, 1000), st.sampled_from(["none", "all", "missing"])),
    st.tuples(st.just("duplicate")),
    st.tuples(st.just("system"), words),
    st.tuples(st.just("reuse"), st.integers(0, 1000), words),  # a new event reusing a message id
)
restarts = st.one_of(
    st.tuples(st.just("clear")), st.tuples(st.just("erase"), st.sampled_from(["always", "applies", "void"]))
)
# A history is turns (a user message, its replies), each followed by a few other events, and
# now and then a clear or an erase: most examples then serve several turns, most of them trimmed.
turns = st.tuples(
    st.tuples(st.just("user"), contents),
    st.lists(replies, min_size=0, max_size=3),
    st.lists(events, max_size=2),
    st.integers(0, 5).flatmap(lambda n: restarts.map(lambda r: [r]) if n == 0 else st.just([])),
)
steps = st.tuples(
    st.lists(st.tuples(st.just("system"), words), max_size=1), st.lists(turns, min_size=1, max_size=8)
).map(lambda h: [*h[0], *(step for user, rs, es, rst in h[1] for step in (user, *rs, *es, *rst))])


class Script:
    """Appends a scripted history to one conversation, keeping what later steps refer to."""

    def __init__(self, producer: ConversationProducer, key: ConversationKey) -> None:
        self.producer = producer
        self.key = key
        self.message_ids: list[str] = []
        self.redacted: list[str] = []
        self.offsets: list[int] = []
        self.last: tuple[Any, ...] | None = None  # how to append the last event again
        self.n = 0

    def _id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def _done(self, appended: Appended, again: tuple[Any, ...]) -> None:
        self.offsets.append(appended.coordinates.offset)
        self.last = again

    async def message(self, message: dict[str, Any], message_id: str | None = None) -> None:
        message_id, event_id = message_id or self._id("m"), self._id("e")
        appended = await self.producer.append_message(self.key, message, message_id=message_id, event_id=event_id)
        self.message_ids.append(message_id)
        self._done(appended, ("message", message, message_id, event_id))

    async def step(self, step: tuple[Any, ...]) -> None:
        kind = step[0]
        if kind == "system":
            await self.message({"role": "system", "content": step[1]})
        elif kind == "user":
            await self.message({"role": "user", "content": step[1]})
        elif kind == "assistant":
            extra = {"reasoning_content": f"thinking about {step[1]}"} if step[2] else {}
            await self.message({"role": "assistant", "content": step[1], "finish_reason": "stop", **extra})
        elif kind == "tools":
            calls = [
                {
                    "id": self._id("call"),
                    "type": "function",
                    "function": {"name": "lookup", "arguments": f'{{"q": {i}, "a": "b"}}'},
                }
                for i in range(step[1])
            ]
            await self.message(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": calls,
                    "finish_reason": "tool_calls",
                    "reasoning_content": "which tool?",
                }
            )
            for call in calls[: step[2]]:
                await self.message({"role": "tool", "tool_call_id": call["id"], "content": f"result {call['id']}"})
        elif kind == "interrupted":
            calls = (
                [{"id": self._id("call"), "type": "function", "function": {"name": "lookup", "arguments": '{"q'}}]
                if step[2]
                else []
            )
            await self.message(
                {
                    "role": "assistant",
                    "content": step[1],
                    "finish_reason": "interrupted",
                    **({"tool_calls": calls} if calls else {}),
                }
            )
        elif kind == "reuse" and self.message_ids:
            await self.message({"role": "user", "content": step[2]}, self.message_ids[step[1] % len(self.message_ids)])
        elif kind == "native":
            await self.native(step[1], calls=step[2], answered=step[3], interrupted=step[4])
        elif kind == "stray_tool":
            await self.message({"role": "tool", "tool_call_id": "nobody-called", "content": step[1]})
        elif kind == "redact" and self.message_ids:
            message_id = self.message_ids[step[1] % len(self.message_ids)]
            event_id = self._id("e")
            self._done(
                await self.producer.redact(self.key, message_id, reason="test", event_id=event_id),
                ("redact", message_id, event_id),
            )
            self.redacted.append(message_id)
        elif kind == "summary" and self.message_ids:
            covers = self.message_ids[step[1] % len(self.message_ids)]
            excluded = {"none": None, "all": tuple(self.redacted), "missing": tuple(self.redacted[1:])}[step[2]]
            body = SummaryRecorded(
                self._id("s"), f"summary through {covers}", covers, "test-model", "v1", excluded_message_ids=excluded
            )
            await self._event(body)
        elif kind == "clear":
            event_id = self._id("e")
            self._done(await self.producer.clear(self.key, event_id=event_id), ("clear", event_id))
        elif kind == "erase":
            only_if = {
                "always": None,
                "applies": self.offsets[-1] if self.offsets else None,
                "void": self.offsets[0] if len(self.offsets) > 1 else None,
            }[step[1]]
            event_id = self._id("e")
            appended = await self.producer.erase(self.key, event_id=event_id, only_if_last_offset=only_if)
            self._done(appended, ("erase", only_if, event_id))
        elif kind == "duplicate" and self.last is not None:
            await self.again(self.last)

    async def native(self, text: str, *, calls: int, answered: int, interrupted: bool) -> None:
        call_ids = tuple(self._id("toolu") for _ in range(calls))
        answer = thinking_answer(self._id("m"), call_ids=call_ids)
        blocks = (*(b for b in answer.blocks if not isinstance(b, TextBlock)), TextBlock(text))
        finish = "interrupted" if interrupted else "tool_calls" if calls else "stop"
        body = native_message(
            message_id=answer.message_id,
            role="assistant",
            blocks=blocks,
            api="anthropic",
            provider="anthropic",
            model=answer.model,
            usage=answer.usage,
            finish_reason=finish,
        )
        await self._message_event(body)
        for i, call_id in enumerate(call_ids[:answered]):
            await self._message_event(
                tool_result(
                    call_id, f"result {call_id}", message_id=self._id("m"), is_error=True if i == answered - 1 else None
                )
            )

    async def _message_event(self, body: MessageAppended) -> None:
        await self._event(body)
        self.message_ids.append(body.message_id)

    async def _event(self, body: Any) -> None:
        event_id = self._id("e")
        self._done(await self.producer.append(self.key, body, event_id=event_id), ("event", body, event_id))

    async def again(self, last: tuple[Any, ...]) -> None:
        """The same event (same event id) appended once more: a producer's retry."""
        kind, *args = last
        if kind == "message":
            appended = await self.producer.append_message(self.key, args[0], message_id=args[1], event_id=args[2])
        elif kind == "redact":
            appended = await self.producer.redact(self.key, args[0], reason="test", event_id=args[1])
        elif kind == "clear":
            appended = await self.producer.clear(self.key, event_id=args[0])
        elif kind == "erase":
            appended = await self.producer.erase(self.key, event_id=args[1], only_if_last_offset=args[0])
        else:
            appended = await self.producer.append(self.key, args[0], event_id=args[1])
        self.offsets.append(appended.coordinates.offset)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=steps, newest_first=st.sampled_from([3, 128]))
async def test_live_context_equals_the_as_of_context_byte_for_byte(
    http_client: httpx.AsyncClient,
    api_service: Service,
    monkeypatch: pytest.MonkeyPatch,
    script: list[tuple[Any, ...]],
    newest_first: int,
) -> None:
    conversation = f"c-{uuid.uuid4().hex[:12]}"
    key = ConversationKey("acme", "u1", conversation)
    history = Script(api_service.deps.producer, key)
    for step in script:
        await history.step(step)
    if not history.offsets:
        return
    last = history.offsets[-1]
    url = f"/v1/users/u1/conversations/{conversation}/context"
    # With 3, the live path reads the newest rows first (query_api/http.py) whenever it can.
    monkeypatch.setattr(ranges, "NEWEST_FIRST", newest_first)
    for reasoning in POLICIES:
        for budget in BUDGETS:
            params = {"model": "gpt-4o", "budget_tokens": budget, "reasoning": reasoning}
            live = await http_client.get(url, params=params | {"min_offset": last}, headers=A)
            rebuilt = await http_client.get(url, params=params | {"as_of": last}, headers=A)
            assert live.status_code in (200, 422), live.text
            assert (rebuilt.status_code, rebuilt.content) == (live.status_code, live.content), (reasoning, budget)
    for budget in BUDGETS:  # cl100k_base, which the service does not store: counted when read
        params = {"model": "gpt-4", "budget_tokens": budget, "reasoning": "tool_turns"}
        live = await http_client.get(url, params=params | {"min_offset": last}, headers=A)
        rebuilt = await http_client.get(url, params=params | {"as_of": last}, headers=A)
        assert live.status_code in (200, 422), live.text
        assert (rebuilt.status_code, rebuilt.content) == (live.status_code, live.content), ("gpt-4", budget)
        assert live.status_code == 422 or live.json()["counted_at_read"] is True
    for fmt, model in (("anthropic", "claude-sonnet-4-5"), ("responses", "gpt-5"), ("gemini", "gemini-2.5-pro")):
        for budget in BUDGETS:
            params = {"model": model, "budget_tokens": budget, "format": fmt}
            live = await http_client.get(url, params=params | {"min_offset": last}, headers=A)
            rebuilt = await http_client.get(url, params=params | {"as_of": last}, headers=A)
            assert live.status_code in (200, 422), live.text
            assert (rebuilt.status_code, rebuilt.content) == (live.status_code, live.content), (fmt, budget)
    # And what every format renders from: the stored messages, native blocks included.
    queries = api_service.deps.queries
    for encoding in ("o200k_base", "cl100k_base"):
        stored = await (await queries.reads()).context_inputs(key, encoding=encoding)
        as_of = await context_inputs_as_of(
            queries.log,
            key,
            last,
            encoding=encoding,
            policy=queries.policy,
            max_event_bytes=queries.max_event_bytes,
            codec=queries.codec,  # the service's: it opens sealed records
        )
        if encoding in queries.counted_encodings:
            assert stored == as_of, encoding
        else:  # counted when read: a message that is never served again has no text left to count
            assert never_served_uncounted(stored) == never_served_uncounted(as_of), encoding


def never_served_uncounted(inputs: ContextInputs | None) -> ContextInputs | None:
    """``inputs`` with the counts of redacted and erased messages (never served, never costed) zeroed."""
    if inputs is None:
        return None

    def zeroed(messages: tuple[StoredMessage, ...]) -> tuple[StoredMessage, ...]:
        return tuple(replace(m, tokens=0, reasoning_tokens=0) if m.redacted or m.erased else m for m in messages)

    return replace(inputs, system=zeroed(inputs.system), messages=zeroed(inputs.messages))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=steps, newest_first=st.sampled_from([3, 128]))
async def test_a_context_counted_when_read_is_the_one_stored_counts_give(
    projection: Projection,
    log: EmbeddedEventLog,
    producer: ConversationProducer,
    monkeypatch: pytest.MonkeyPatch,
    script: list[tuple[Any, ...]],
    newest_first: int,
) -> None:
    """CONVLOG_TOKEN_ENCODINGS=o200k_base (the default) stores no cl100k_base counts: a gpt-4
    context counts its messages when it reads them, and is — same counts, same trimming, byte
    for byte but for saying so — the context of a version that stored both encodings, and the
    one ``as_of`` rebuilds from the log."""
    key = ConversationKey("acme", "u1", f"c-{uuid.uuid4().hex[:12]}")
    history = Script(producer, key)
    for step in script:
        await history.step(step)
    if not history.offsets:
        return
    await project_all(log, projection.store())  # the default: o200k_base only
    both = await projection.new_version()
    await project_all(log, projection.store(schema=both.schema, counter=TokenCounter(encodings=ENCODINGS)))
    stored = await projection.rows("SELECT DISTINCT tokens_cl100k, reasoning_tokens_cl100k FROM {s}.transcript")
    assert stored in ([], [(None, None)])
    only_o200k = PostgresReadModels(projection.pool, schema=projection.version.schema)
    counted_both = PostgresReadModels(projection.pool, schema=both.schema)
    monkeypatch.setattr(ranges, "NEWEST_FIRST", newest_first)
    spec = model_spec("gpt-4")
    assert spec.encoding == "cl100k_base"
    for reasoning in POLICIES:
        for budget in BUDGETS:
            request = ContextRequest("gpt-4", budget, 0, 0, reasoning, 2)
            bodies = []
            for reads, counted in ((only_o200k, DEFAULT_COUNTED), (counted_both, ENCODINGS)):
                try:
                    ctx, inputs = await assemble_live(reads, key, spec, request)
                except ContextBudgetExceededError as e:
                    bodies.append({"needed": e.needed})
                else:
                    bodies.append(context_body(ctx, inputs, spec, counted=counted))
            at_read, from_stored = bodies
            if "needed" not in at_read:
                assert at_read.pop("counted_at_read") is True
                assert "counted_at_read" not in from_stored
                served = await context_as_of(
                    log,
                    key,
                    history.offsets[-1],
                    request=request,
                    spec=spec,
                    policy=WindowPolicy(),
                    max_event_bytes=1 << 20,
                    start_offset=0,
                )
                assert served is not None
                assert context_body(*served, spec, counted=ENCODINGS) == from_stored
            assert json.dumps(at_read) == json.dumps(from_stored), (reasoning, budget)
    async with projection.pool.connection() as conn:
        await conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(both.schema)))


async def test_content_parts_are_served_in_the_order_the_producer_sent_them(http_client: httpx.AsyncClient) -> None:
    """A jsonb column sorted a text part's keys ("text" before "type") in the live context only."""
    user = (
        '{"role":"user","content":[{"type":"text","text":"hello"},'
        '{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"low"}}]}'
    )
    calls = '"tool_calls":[{"id":"c1","type":"function","function":{"name":"lookup","arguments":"{\\"q\\": 1}"}}]'
    tool = '{"role":"tool","tool_call_id":"c1","content":[{"type":"text","text":"found"}]}'
    url = "/v1/users/u1/conversations/parts"
    for body in (user, '{"role":"assistant","content":null,' + calls + ',"finish_reason":"tool_calls"}', tool):
        response = await http_client.post(
            f"{url}/messages", content=body, headers={**A, "Content-Type": "application/json"}
        )
        assert response.status_code == 202, response.text
    last = response.json()["offset"]
    params = {"model": "gpt-4o", "budget_tokens": 4000}
    live = await http_client.get(f"{url}/context", params=params | {"min_offset": last}, headers=A)
    rebuilt = await http_client.get(f"{url}/context", params=params | {"as_of": last}, headers=A)
    # The message-level fields in the renderer's order; the content parts and tool calls as sent.
    served_tool = '{"role":"tool","content":[{"type":"text","text":"found"}],"tool_call_id":"c1"}'
    served = '{"messages":[' + user + ',{"role":"assistant","content":null,' + calls + "}," + served_tool + "],"
    assert live.content.startswith(served.encode()), live.text
    assert rebuilt.content == live.content


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=steps, live_batch=st.sampled_from([1, 3, 500]))
async def test_a_rebuild_equals_the_live_version_row_for_row(
    projection: Projection,
    log: EmbeddedEventLog,
    producer: ConversationProducer,
    script: list[tuple[Any, ...]],
    live_batch: int,
) -> None:
    """The same random histories (native messages among them), projected live in small batches
    and rebuilt from offset 0 in one: every checked table equal as stored, byte for byte."""
    key = ConversationKey("acme", "u1", f"c-{uuid.uuid4().hex[:12]}")
    history = Script(producer, key)
    for step in script:
        await history.step(step)
    await project_all(log, projection.store(), batch_size=live_batch)
    rebuilt = await projection.new_version()
    await project_all(log, projection.store(schema=rebuilt.schema, fail_fast=True), batch_size=1000)
    async with projection.pool.connection() as conn:
        assert await compare(conn, projection.version.schema, rebuilt.schema) == []
        await conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(rebuilt.schema)))


async def test_a_version_made_with_jsonb_keeps_working_and_a_rebuild_compares_equal_to_it(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    """Versions created before read_models.sql chose json store jsonb: they go on projecting and
    serving (in jsonb's key order), and a rebuild — which makes the json form — compares equal to
    them by value, so ``rebuild --verify --switch`` moves them over. Two json versions are
    compared as stored: a change of key order alone is a difference there."""
    legacy = projection.version.schema
    await projection.execute(
        "ALTER TABLE {s}.transcript ALTER COLUMN content TYPE jsonb USING content::jsonb, "
        "ALTER COLUMN tool_calls TYPE jsonb USING tool_calls::jsonb"
    )
    key = ConversationKey("acme", "u1", "old")
    await producer.append_user(key, [{"type": "text", "text": "hello"}], message_id="u1")
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    await producer.append_message(key, {"role": "assistant", "content": None, "tool_calls": [call]})
    await producer.append_tool_result(key, tool_call_id="c1", content="found")
    await producer.redact(key, "u1", reason="test")
    await producer.append_user(key, [{"type": "text", "text": "again"}])
    await project_all(log, projection.store())
    inputs = await PostgresReadModels(projection.pool, schema=legacy).context_inputs(key, encoding="o200k_base")
    assert inputs is not None
    assert [m.content for m in inputs.messages] == [None, None, "found", [{"text": "again", "type": "text"}]]
    assert inputs.messages[1].tool_calls == (call,)

    rebuilt = await projection.new_version()
    await project_all(log, projection.store(schema=rebuilt.schema), batch_size=2)
    [(content,)] = await projection.rows(
        "SELECT content::text FROM {s}.transcript WHERE seq = 3", schema=rebuilt.schema
    )
    assert content == '[{"type":"text","text":"again"}]'
    async with projection.pool.connection() as conn:
        assert await json_forms_differ(conn, legacy, rebuilt.schema)
        assert await compare(conn, legacy, rebuilt.schema) == []

        other = await projection.new_version()
        await project_all(log, projection.store(schema=other.schema))
        assert await compare(conn, rebuilt.schema, other.schema) == []
        await projection.execute(
            """UPDATE {s}.transcript SET content = '[{{"text":"again","type":"text"}}]' WHERE seq = 3""",
            schema=other.schema,
        )
        assert await compare(conn, rebuilt.schema, other.schema) == [("transcript", str(key))]


@pytest.mark.parametrize("batch_size", [1, 1000])
async def test_a_redaction_covers_every_earlier_row_of_a_reused_message_id(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer, batch_size: int
) -> None:
    """A producer that reuses a message id across a clear: the redaction clears both rows and
    withdraws the new epoch's summary over the second; a row appended after the redaction with
    the id again keeps its content — whatever the batches."""
    key = ConversationKey("acme", "u1", "reused")
    await producer.append_user(key, "Q1: my secret is S1", message_id="q")
    await producer.append_assistant(key, "A1", message_id="a1")
    await producer.clear(key)
    await producer.append_user(key, "Q2: my secret is still S1", message_id="q")
    await producer.append_assistant(key, "A2", message_id="a2")
    await producer.append(key, SummaryRecorded("s2", "Q2 told S1.", "a2", "test-model", "v1"), event_id="s2")
    await producer.redact(key, "q", reason="pii")
    await producer.append_user(key, "Q3: a new question", message_id="q")
    last = await producer.append_assistant(key, "A3", message_id="a3")
    await project_all(log, projection.store(), batch_size=batch_size)

    rows = await projection.rows(
        "SELECT seq, epoch, content::text, redacted_at IS NOT NULL FROM {s}.transcript "
        "WHERE message_id = 'q' ORDER BY seq"
    )
    assert rows == [(0, 0, None, True), (2, 1, None, True), (5, 1, '"Q3: a new question"', False)]
    assert await projection.rows("SELECT summary_id, text FROM {s}.summaries") == [("s2", None)]
    inputs = await context_inputs_as_of(
        log, key, last.coordinates.offset, encoding="o200k_base", policy=WindowPolicy(), max_event_bytes=1 << 20
    )
    assert inputs is not None
    assert inputs.summary is None
    assert [(m.seq, m.redacted) for m in inputs.messages] == [(2, True), (3, False), (5, False), (6, False)]
