"""The HTTP API end to end: embedded log, real Postgres, the projector running in-process."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convlog.demo.data import OA_SYSTEM_PROMPT, OA_TURNS
from convlog.runtime.serve import Service
from events.event_types import SummaryRecorded
from events.formats.chat_completions.rules import violations
from events.keys import ConversationKey
from query_api.live import ranges

# Seed 000's window (the default before 12 -> 4): its ten OA turns move it once.
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.service_settings(summarizer="on", window_max_turns=8, window_keep_turns=6),
]

A = {"Authorization": "Bearer token-a"}
B = {"Authorization": "Bearer token-b"}
BASE = "/v1/users/u1/conversations"


async def post(http_client: httpx.AsyncClient, conversation: str, message: dict[str, Any], **headers: str) -> Any:
    response = await http_client.post(f"{BASE}/{conversation}/messages", json=message, headers={**A, **headers})
    assert response.status_code == 202, response.text
    return response.json()


async def caught_up(http_client: httpx.AsyncClient, conversation: str, offset: int) -> None:
    """Wait until the read models applied ``offset`` (the context's read-your-writes); fails
    when they do not in time, so that a test never checks reads that were not caught up."""
    params = {"model": "gpt-4o", "budget_tokens": 100_000, "min_offset": offset}
    response = await http_client.get(f"{BASE}/{conversation}/context", params=params, headers=A)
    assert response.status_code == 200, response.text


async def oa(http_client: httpx.AsyncClient) -> Any:
    last = await post(http_client, "oa", {"role": "system", "content": OA_SYSTEM_PROMPT})
    for question, answer in OA_TURNS:
        await post(http_client, "oa", {"role": "user", "content": question})
        last = await post(http_client, "oa", {"role": "assistant", "content": answer, "finish_reason": "stop"})
    return last


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", f"{BASE}/oa/context?model=gpt-4o&budget_tokens=1000"),
        ("POST", f"{BASE}/oa/messages"),
        ("GET", f"{BASE}/oa/messages"),
        ("GET", f"{BASE}/oa/events"),
        ("GET", f"{BASE}/oa/summaries"),
        ("GET", BASE),
        ("POST", f"{BASE}/oa/clear"),
        ("DELETE", f"{BASE}/oa"),
    ],
)
async def test_a_token_is_required_everywhere(http_client: httpx.AsyncClient, method: str, path: str) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "token-a"}, {"Authorization": "Bearer "}):
        body = {"role": "user", "content": "hi"} if method == "POST" else None
        response = await http_client.request(method, path, headers=headers, json=body)
        assert response.status_code == 401, (method, path, headers)
        assert response.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("api_service", ["off"], indirect=True)  # no summary event may land in between
async def test_read_your_writes_and_a_valid_context(http_client: httpx.AsyncClient) -> None:
    last = await oa(http_client)
    response = await http_client.get(
        f"{BASE}/oa/context",
        params={"model": "gpt-4o", "budget_tokens": 2000, "min_offset": last["offset"]},
        headers=A,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert violations(body["messages"]) == []
    assert body["messages"][0] == {"role": "system", "content": OA_SYSTEM_PROMPT}
    assert body["messages"][-1]["content"] == OA_TURNS[-1][1]  # the last answer is there: caught up
    assert body["encoding"] == "o200k_base"
    assert body["token_count"] <= 2000
    assert body["position"]["offset"] == last["offset"]
    assert (body["compressed"], body["degraded"]) == (False, False)


async def test_budget_too_small_is_a_clear_error(http_client: httpx.AsyncClient) -> None:
    last = await oa(http_client)
    response = await http_client.get(
        f"{BASE}/oa/context",
        params={"model": "gpt-4o", "budget_tokens": 30, "min_offset": last["offset"]},
        headers=A,
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "context_budget_exceeded"
    assert error["needed"] > error["available"]


async def test_other_tenants_and_unknown_conversations_are_404_everywhere(http_client: httpx.AsyncClient) -> None:
    last = await post(http_client, "secret", {"role": "user", "content": "mine"})
    await caught_up(http_client, "secret", last["offset"])
    for method, path in (
        ("GET", f"{BASE}/secret/context?model=gpt-4o&budget_tokens=1000"),
        ("GET", f"{BASE}/secret/messages"),
        ("GET", f"{BASE}/secret/events"),
        ("GET", f"{BASE}/secret/summaries"),
        ("POST", f"{BASE}/secret/clear"),
        ("DELETE", f"{BASE}/secret"),
    ):
        for headers, conversation in ((B, "secret"), (A, "never-seen")):
            response = await http_client.request(method, path.replace("secret", conversation), headers=headers)
            assert response.status_code == 404, (method, path, headers, response.text)
    listing = await http_client.get(BASE, headers=B)
    assert listing.json()["conversations"] == []
    mine = (await http_client.get(BASE, headers=A)).json()["conversations"]
    assert [c["conversation_id"] for c in mine] == ["secret"]  # it exists: the 404s are the tenant's


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"role": "wizard", "content": "x"}, 422, "role"),
        ({"role": "tool", "content": "42"}, 422, "tool_call_id"),
        (
            {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{x"}}]},
            422,
            "tool_calls[0].id",
        ),
        ({"role": "user"}, 422, "content"),
        ([1, 2, 3], 422, None),
        ("just a string", 422, None),
    ],
)
async def test_invalid_bodies_are_422_with_the_field(
    http_client: httpx.AsyncClient, body: Any, status: int, field: str | None
) -> None:
    response = await http_client.post(f"{BASE}/c/messages", json=body, headers=A)
    assert response.status_code == status, response.text
    if field is not None:
        assert response.json()["error"]["field"] == field


async def test_oversized_bodies_are_413(http_client: httpx.AsyncClient, api_service: Service) -> None:
    huge = {"role": "user", "content": "x" * (api_service.deps.http.max_body_bytes + 10)}
    response = await http_client.post(f"{BASE}/c/messages", json=huge, headers=A)
    assert response.status_code == 413
    event_sized = {"role": "user", "content": "x" * (1024 * 1024 + 10)}
    response = await http_client.post(f"{BASE}/c/messages", json=event_sized, headers=A)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "event_too_large"


async def test_a_chunked_body_is_cut_off_at_the_limit(http_client: httpx.AsyncClient, api_service: Service) -> None:
    async def chunks() -> Any:
        for _ in range(api_service.deps.http.max_body_bytes // 65536 + 2):
            yield b" " * 65536  # whitespace: it would parse if it were ever read whole

    response = await http_client.post(f"{BASE}/c/messages", content=chunks(), headers=A)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


async def test_idempotency_key_becomes_the_event_id(http_client: httpx.AsyncClient) -> None:
    first = await post(http_client, "c", {"role": "user", "content": "once"}, **{"Idempotency-Key": "req-42"})
    again = await post(http_client, "c", {"role": "user", "content": "once"}, **{"Idempotency-Key": "req-42"})
    assert first["event_id"] == again["event_id"] == "req-42"
    await caught_up(http_client, "c", again["offset"])
    page = (await http_client.get(f"{BASE}/c/messages", headers=A)).json()
    assert [m["content"] for m in page["messages"]] == ["once"]


async def test_transcript_pages_and_conversation_list(http_client: httpx.AsyncClient) -> None:
    last = await oa(http_client)
    later = await post(http_client, "later", {"role": "user", "content": "newest activity"})
    await caught_up(http_client, "oa", last["offset"])
    await caught_up(http_client, "later", later["offset"])
    seen: list[int] = []
    before = None
    while True:
        params = {"limit": 7} | ({"before": before} if before is not None else {})
        page = (await http_client.get(f"{BASE}/oa/messages", params=params, headers=A)).json()
        seen = [m["seq"] for m in page["messages"]] + seen
        before = page["next_before"]
        if before is None:
            break
    assert seen == list(range(21))
    # Latest user activity first (not creation, not the latest event of any kind):
    listing = (await http_client.get(BASE, headers=A)).json()["conversations"]
    assert [c["conversation_id"] for c in listing] == ["later", "oa"]
    again = await post(http_client, "oa", {"role": "user", "content": "back to the old one"})
    answer = await post(http_client, "later", {"role": "assistant", "content": "an answer", "finish_reason": "stop"})
    await caught_up(http_client, "oa", again["offset"])
    await caught_up(http_client, "later", answer["offset"])
    listing = (await http_client.get(BASE, headers=A)).json()["conversations"]
    assert [c["conversation_id"] for c in listing] == ["oa", "later"]


async def test_erased_content_is_withheld_from_the_raw_events(http_client: httpx.AsyncClient) -> None:
    first = await post(http_client, "gone", {"role": "user", "content": "my secret"})
    await caught_up(http_client, "gone", first["offset"])
    erase = await http_client.delete(f"{BASE}/gone", headers=A)
    assert erase.status_code == 202
    events = (await http_client.get(f"{BASE}/gone/events", headers=A)).json()["events"]
    assert [e["event_type"] for e in events] == ["MessageAppended", "ConversationErased"]
    assert "my secret" not in json.dumps(events)
    await caught_up(http_client, "gone", erase.json()["offset"])
    transcript = (await http_client.get(f"{BASE}/gone/messages", headers=A)).json()["messages"]
    assert transcript[0]["content"] is None
    assert transcript[0]["erased_at"] is not None


@pytest.mark.parametrize("api_service", ["off"], indirect=True)  # the test records its own summary
async def test_raw_events_withhold_what_the_projection_redacts_and_withdraws(
    api_service: Service, http_client: httpx.AsyncClient
) -> None:
    key = ConversationKey("acme", "u1", "card")
    await post(http_client, "card", {"role": "user", "content": "my card is 4111", "message_id": "m1"})
    answer = await post(http_client, "card", {"role": "assistant", "content": "noted", "finish_reason": "stop"})
    summary = SummaryRecorded("s1", "The user's card is 4111.", answer["message_id"], "test-model", "v1")
    await api_service.deps.producer.append(key, summary)
    await api_service.deps.producer.redact(key, "m1", reason="pii")
    # The same message id reused after the redaction is a new row the redaction never named.
    reused = await post(http_client, "card", {"role": "user", "content": "a new question", "message_id": "m1"})
    await caught_up(http_client, "card", reused["offset"])
    events = (await http_client.get(f"{BASE}/card/events", headers=A)).json()["events"]
    assert "4111" not in json.dumps(events)  # neither the message nor the summary that repeats it
    assert [e["body"].get("content") for e in events if e["event_type"] == "MessageAppended"] == [
        "[withheld]",
        "noted",
        "a new question",
    ]
    summaries = (await http_client.get(f"{BASE}/card/summaries", headers=A)).json()["summaries"]
    assert [s["status"] for s in summaries] == ["withdrawn"]  # the read models agree


async def test_an_undecodable_record_of_a_conversation_is_a_409_naming_it_not_a_500(
    api_service: Service, http_client: httpx.AsyncClient
) -> None:
    key = ConversationKey("acme", "u1", "foreign")
    await post(http_client, "foreign", {"role": "user", "content": "hello"})
    bad = await api_service.deps.queries.log.append(key=key.encode(), value=b"not avro")  # a foreign producer's record
    keyed = await post(http_client, "foreign", {"role": "user", "content": "again"}, **{"Idempotency-Key": "k-1"})
    assert keyed["offset"] > bad.offset  # a keyed append looks past the record it cannot decode
    for path, params in (
        (f"{BASE}/foreign/events", {}),
        (f"{BASE}/foreign/context", {"model": "gpt-4o", "budget_tokens": 1000, "as_of": keyed["offset"]}),
    ):
        response = await http_client.get(path, params=params, headers=A)
        assert response.status_code == 409, response.text
        error = response.json()["error"]
        assert (error["code"], error["partition"], error["offset"]) == ("undecodable_record", bad.partition, bad.offset)
    # The projection went on past it, holding the conversation's later records: a read-your-writes
    # context names the dead letter instead of answering without them.
    params = {"model": "gpt-4o", "budget_tokens": 1000, "min_offset": keyed["offset"]}
    parked = await http_client.get(f"{BASE}/foreign/context", params=params, headers=A)
    assert (parked.status_code, parked.json()["error"]["code"]) == (409, "conversation_parked"), parked.text
    assert (await http_client.get(f"{BASE}/foreign/events", headers=A)).status_code == 409  # from the index too


async def test_health_readiness_metrics_and_openapi(http_client: httpx.AsyncClient) -> None:
    assert (await http_client.get("/healthz")).json() == {"status": "ok"}
    for _ in range(100):  # ready once the projector has its positions
        ready = await http_client.get("/readyz")
        if ready.status_code == 200:
            break
        await asyncio.sleep(0.1)
    assert ready.status_code == 200, ready.text
    assert ready.json()["postgres"] is True
    assert ready.json()["summarizer"] is True
    await http_client.get("/healthz")
    metrics = (await http_client.get("/metrics")).text
    assert "convlog_http_requests_total" in metrics
    assert "convlog_projector_ready 1.0" in metrics
    assert "convlog_projector_applied_total" in metrics
    assert 'convlog_projection_latency_seconds_bucket{le="+Inf"}' in metrics
    spec = (await http_client.get("/openapi.json")).json()
    assert f"{BASE}/{{conversation_id}}/context".replace("u1", "{user_id}") in spec["paths"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=st.sampled_from(["GET", "POST", "DELETE"]),
    suffix=st.sampled_from(["/c/context", "/c/messages", "/c/events", "/c/clear", "/c", ""]),
    params=st.dictionaries(
        st.sampled_from(["model", "budget_tokens", "reserve_tokens", "reasoning", "min_offset", "limit", "before"]),
        st.one_of(st.text(max_size=20), st.integers(-(10**12), 10**12).map(str)),
        max_size=5,
    ),
    body=st.one_of(st.none(), st.dictionaries(st.text(max_size=10), st.text(max_size=10) | st.integers(), max_size=4)),
    user=st.sampled_from(["u1", "a%3Ab", "%20", "x" * 300]),
)
async def test_fuzzed_requests_never_get_a_5xx(
    http_client: httpx.AsyncClient, method: str, suffix: str, params: dict[str, str], body: Any, user: str
) -> None:
    params.pop("min_offset", None)  # waiting on an offset nobody writes is a 503 by design
    response = await http_client.request(
        method, f"/v1/users/{user}/conversations{suffix}", params=params, json=body, headers=A
    )
    assert response.status_code < 500, (method, suffix, params, body, response.text)


@pytest.mark.parametrize("api_service", ["off"], indirect=True)
@pytest.mark.parametrize("newest_first", [400, 3])
async def test_as_of_reproduces_earlier_answers_byte_for_byte(
    http_client: httpx.AsyncClient, api_service: Service, monkeypatch: pytest.MonkeyPatch, newest_first: int
) -> None:
    """Contexts recorded while the conversation grows equal, later, the ones rebuilt with as_of
    (from the log, whole). With newest_first=3 the live answers come from reading only the
    newest rows whenever the budget allows it."""
    monkeypatch.setattr(ranges, "NEWEST_FIRST", newest_first)
    script: list[dict[str, Any]] = [{"role": "system", "content": OA_SYSTEM_PROMPT}]
    for i, (question, answer) in enumerate(OA_TURNS):
        script.append({"role": "user", "content": question})
        if i % 3 == 1:
            script.append(
                {
                    "role": "assistant",
                    "content": None,
                    "finish_reason": "tool_calls",
                    "reasoning_content": f"look up {i}",
                    "tool_calls": [
                        {"id": f"c{i}", "type": "function", "function": {"name": "kb", "arguments": '{"q": 1}'}}
                    ],
                }
            )
            script.append({"role": "tool", "tool_call_id": f"c{i}", "content": "found it"})
        script.append({"role": "assistant", "content": answer, "finish_reason": "stop"})
    recorded: list[tuple[int, str]] = []
    message_ids: list[str] = []
    params = {"model": "gpt-4o", "budget_tokens": 700, "reasoning": "tool_turns"}
    for n, message in enumerate(script):
        appended = await post(http_client, "audit", message)
        message_ids.append(appended["message_id"])
        if n == 12:  # a summary of the first turns, as the summarizer records it
            summary = SummaryRecorded(
                "s1",
                "The user is an outsourced employee asking about overtime.",
                appended["message_id"],
                "test-model",
                "v1",
            )
            done = await api_service.deps.producer.append(ConversationKey("acme", "u1", "audit"), summary)
            appended = {"offset": done.offset}
        if n == len(script) - 8:  # and a new chat late in the conversation
            appended = (await http_client.post(f"{BASE}/audit/clear", headers=A)).json()
        live = await http_client.get(
            f"{BASE}/audit/context", params=params | {"min_offset": appended["offset"]}, headers=A
        )
        assert live.status_code == 200, live.text
        recorded.append((appended["offset"], live.text))
    assert any('"compressed":true' in text for _, text in recorded)  # the summary was in play
    for offset, text in recorded:
        again = await http_client.get(f"{BASE}/audit/context", params=params | {"as_of": offset}, headers=A)
        assert again.text == text
    # "What did the model see when it wrote this answer?": the context served right before it.
    for n in range(1, len(script)):
        before = await http_client.get(
            f"{BASE}/audit/context", params=params | {"before_message": message_ids[n]}, headers=A
        )
        assert before.text == recorded[n - 1][1], n
    unknown = await http_client.get(f"{BASE}/audit/context", params=params | {"before_message": "nope"}, headers=A)
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "unknown_message")
    first = await http_client.get(
        f"{BASE}/audit/context", params=params | {"before_message": message_ids[0]}, headers=A
    )
    assert (first.status_code, first.json()["error"]["code"]) == (404, "not_found")
    both = await http_client.get(
        f"{BASE}/audit/context", params=params | {"as_of": 1, "before_message": "x"}, headers=A
    )
    assert both.status_code == 422


async def test_context_is_compressed_once_the_summarizer_folded_the_turns_that_left_the_window(
    http_client: httpx.AsyncClient,
) -> None:
    """Ten OA turns: turn 9 pushed turns 1-3 out of the window; the (offline) summarizer folds
    them into a summary event, and the served context says so."""
    last = await oa(http_client)
    params = {"model": "gpt-4o", "budget_tokens": 8000, "min_offset": last["offset"]}
    for _ in range(200):
        body = (await http_client.get(f"{BASE}/oa/context", params=params, headers=A)).json()
        if body["compressed"]:
            break
        assert body["summary"] is None
        assert body["messages"][1]["content"] == OA_TURNS[0][0]  # uncovered turns are served raw meanwhile
        await asyncio.sleep(0.05)
    assert body["compressed"]
    assert body["summary"]["text"] in body["messages"][1]["content"]
    assert OA_TURNS[0][0] in body["summary"]["text"]  # the first question survives, in the summary
    assert body["messages"][2]["content"] == OA_TURNS[3][0]  # then the window: turns 4-10
    assert len([m for m in body["messages"] if m["role"] == "user"]) == 7
    metrics = (await http_client.get("/metrics")).text
    assert "convlog_summaries_recorded_total 1.0" in metrics
    [entry] = (await http_client.get(f"{BASE}/oa/summaries", headers=A)).json()["summaries"]
    assert entry["status"] == "current"
    assert entry["text"] == body["summary"]["text"]
    assert (entry["model"], entry["prompt_version"]) == ("convlog-offline-extractive", "offline-v1")
    assert entry["summary_tokens"] > 0


async def test_read_your_writes_under_concurrent_appends(http_client: httpx.AsyncClient) -> None:
    async def writer(i: int) -> None:
        for turn in range(3):
            appended = await post(http_client, f"rw-{i}", {"role": "user", "content": f"writer {i} turn {turn}"})
            response = await http_client.get(
                f"{BASE}/rw-{i}/context",
                headers=A,
                params={"model": "gpt-4o", "budget_tokens": 5000, "min_offset": appended["offset"]},
            )
            assert response.status_code == 200, response.text
            assert response.json()["messages"][-1]["content"] == f"writer {i} turn {turn}"

    await asyncio.gather(*(writer(i) for i in range(20)))
