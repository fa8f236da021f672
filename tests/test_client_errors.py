"""The client's failure paths, against httpx's MockTransport: every status and code onto its
class of the ConvlogError tree with what the server said kept; retries only of what is
retriable, bounded, with the same Idempotency-Key; timeouts; the endpoint from the environment."""

from __future__ import annotations

import inspect
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from convlog.client import (
    NO_RETRY,
    AsyncConvlogClient,
    BudgetExceededError,
    ClientError,
    ClientTimeoutError,
    ConflictError,
    ConvlogClient,
    NotFoundError,
    RejectedEventError,
    RejectedRequestError,
    RetryPolicy,
    ServerError,
    ServiceUnavailableError,
    UnauthorizedError,
    UnexpectedResponseError,
    UnreachableError,
)
from convlog.client.config import endpoint
from convlog.settings import Settings
from events.errors import ConvlogError, InvalidEventError, InvalidRequestError

REPO = Path(__file__).resolve().parent.parent
FAST = RetryPolicy(attempts=4, backoff_s=0.001, max_backoff_s=0.002, total_s=5)
APPENDED = {"event_id": "e1", "message_id": "m1", "partition": 3, "offset": 7}
CONTEXT = {
    "messages": [{"role": "user", "content": "hi"}],
    "format": "chat_completions",
    "token_count": 8,
    "encoding": "o200k_base",
    "encoding_estimated": False,
    "summary": None,
    "dropped_turns": 0,
    "dropped": [],
    "compressed": False,
    "degraded": False,
    "position": {"partition": 3, "offset": 7},
    "prompt_cache_key": "convlog-x",
}
USER = {"role": "user", "content": "hi"}
TOKEN = "t"  # noqa: S105 -- a test token
Handler = Callable[[httpx.Request], httpx.Response]


def error(status: int, code: str, message: str = "m", headers: dict[str, str] | None = None, **extra: Any) -> Handler:
    body = {"error": {"code": code, "message": message, **extra}}
    return lambda request: httpx.Response(status, json=body, headers=headers)


class Recorder:
    """Answers each request with the next handler (the last one repeats) and keeps the requests."""

    def __init__(self, *handlers: Handler) -> None:
        self.handlers, self.requests = list(handlers), []  # type: ignore[var-annotated]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        handler = self.handlers[min(len(self.requests), len(self.handlers)) - 1]
        return handler(request)


def client(recorder: Recorder, retry: RetryPolicy = FAST, **kw: Any) -> ConvlogClient:
    return ConvlogClient("http://convlog.test", token=TOKEN, retry=retry, transport=httpx.MockTransport(recorder), **kw)


def ok(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Handler:
    return lambda request: httpx.Response(status, json=body, headers=headers)


@pytest.mark.parametrize(
    ("status", "code", "on_append", "cls", "retriable"),
    [
        (401, "unauthorized", False, UnauthorizedError, False),
        (403, "forbidden", False, UnauthorizedError, False),
        (404, "not_found", False, NotFoundError, False),
        (404, "unknown_message", False, NotFoundError, False),
        (409, "idempotency_key_reused", True, ConflictError, False),
        (409, "undecodable_record", False, ConflictError, False),
        (413, "payload_too_large", True, RejectedEventError, False),
        (413, "event_too_large", True, RejectedEventError, False),
        (422, "invalid_event", True, RejectedEventError, False),
        (422, "invalid_key", True, RejectedEventError, False),
        (422, "invalid_json", True, RejectedEventError, False),
        (422, "orphan_tool_result", True, RejectedEventError, False),
        (422, "invalid_request", False, RejectedRequestError, False),
        (422, "offset_beyond_log_end", False, RejectedRequestError, False),
        (400, "bad_request", False, RejectedRequestError, False),
        (422, "context_budget_exceeded", False, BudgetExceededError, False),
        (429, "too_many_requests", False, ServiceUnavailableError, True),
        (500, "invariant_violation", False, ServerError, False),
        (502, "bad_gateway", False, ServiceUnavailableError, True),
        (503, "not_caught_up", False, ServiceUnavailableError, True),
        (503, "log_unavailable", True, ServiceUnavailableError, True),
        (503, "store_unavailable", False, ServiceUnavailableError, True),
        (504, "gateway_timeout", False, ServiceUnavailableError, True),
    ],
)
def test_every_status_and_code_is_its_class_with_what_the_server_said(
    status: int, code: str, on_append: bool, cls: type[ClientError], retriable: bool
) -> None:
    recorder = Recorder(error(status, code, "what went wrong", field="content", partition=3))
    with client(recorder, retry=NO_RETRY) as c:
        call = (
            (lambda: c.append("u", "c", USER))
            if on_append
            else (lambda: c.context("u", "c", model="m", budget_tokens=1))
        )
        with pytest.raises(cls) as raised:
            call()
    e = raised.value
    assert isinstance(e, ConvlogError)
    assert (e.status, e.code, e.message, e.retriable) == (status, code, "what went wrong", retriable)
    assert e.extra == {"field": "content", "partition": 3}
    assert e.field == "content"
    assert type(e).code != code or code in {"unauthorized", "not_found"}  # the class keeps its own code
    if cls is RejectedEventError:
        assert isinstance(e, InvalidEventError)  # except clauses written for the producer still catch it
    if cls is RejectedRequestError:
        assert isinstance(e, InvalidRequestError)


def test_a_budget_error_says_how_many_tokens_were_needed() -> None:
    recorder = Recorder(error(422, "context_budget_exceeded", needed=900, available=100))
    with client(recorder) as c, pytest.raises(BudgetExceededError) as raised:
        c.context("u", "c", model="gpt-4o", budget_tokens=100)
    assert (raised.value.needed, raised.value.available) == (900, 100)
    assert len(recorder.requests) == 1


def test_answers_that_are_not_the_apis_are_unexpected_or_go_by_status() -> None:
    page = lambda request: httpx.Response(200, text="<html>proxy login</html>")  # noqa: E731
    with client(Recorder(page)) as c, pytest.raises(UnexpectedResponseError):
        c.context("u", "c", model="gpt-4o", budget_tokens=100)
    with client(Recorder(ok({"no": "position"}))) as c, pytest.raises(UnexpectedResponseError):
        c.context("u", "c", model="gpt-4o", budget_tokens=100)
    plain = lambda request: httpx.Response(404, text="nothing here")  # noqa: E731
    with client(Recorder(plain)) as c, pytest.raises(NotFoundError) as raised:
        c.messages("u", "c")
    assert raised.value.code == "not_found"
    assert "nothing here" in raised.value.message


def test_a_retriable_failure_is_retried_and_the_append_sends_one_key_on_every_try() -> None:
    recorder = Recorder(error(503, "log_unavailable"), error(503, "log_unavailable"), ok(APPENDED, 202))
    with client(recorder) as c:
        appended = c.append("u", "c", USER)
    assert appended.offset == 7
    assert appended.last.event_id == "e1"
    keys = [r.headers["Idempotency-Key"] for r in recorder.requests]
    assert len(keys) == 3
    assert len(set(keys)) == 1
    assert json.loads(recorder.requests[0].content) == USER


def test_the_callers_key_is_the_one_sent_and_each_append_gets_its_own() -> None:
    recorder = Recorder(ok(APPENDED, 202))
    with client(recorder) as c:
        c.append("u", "c", USER, idempotency_key="mine")
        c.append("u", "c", USER)
        c.append("u", "c", USER)
    keys = [r.headers["Idempotency-Key"] for r in recorder.requests]
    assert keys[0] == "mine"
    assert len(set(keys)) == 3


def test_dropped_connections_and_timeouts_are_retried_for_an_append() -> None:
    failures = [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("cut")]

    def flaky(request: httpx.Request) -> httpx.Response:
        if failures:
            raise failures.pop(0)
        return httpx.Response(202, json=APPENDED)

    recorder = Recorder(flaky)
    with client(recorder) as c:
        assert c.append("u", "c", USER).offset == 7
    assert len({r.headers["Idempotency-Key"] for r in recorder.requests}) == 1
    assert len(recorder.requests) == 4


@pytest.mark.parametrize("status", [400, 401, 404, 409, 413, 422, 500])
def test_a_4xx_or_a_500_is_not_retried(status: int) -> None:
    recorder = Recorder(error(status, "x"), ok(CONTEXT))
    with client(recorder) as c, pytest.raises(ClientError):
        c.context("u", "c", model="gpt-4o", budget_tokens=100)
    assert len(recorder.requests) == 1


def test_what_the_server_marks_retriable_is_retried() -> None:
    recorder = Recorder(error(409, "busy", retriable=True), ok(CONTEXT))
    with client(recorder) as c:
        assert c.context("u", "c", model="gpt-4o", budget_tokens=100).token_count == 8
    assert len(recorder.requests) == 2


def test_retries_stop_after_the_attempts_and_the_last_failure_is_raised() -> None:
    recorder = Recorder(error(503, "not_caught_up", partition=3))
    with (
        client(recorder, retry=RetryPolicy(attempts=3, backoff_s=0.001)) as c,
        pytest.raises(ServiceUnavailableError) as raised,
    ):
        c.context("u", "c", model="gpt-4o", budget_tokens=100, min_offset=5)
    assert len(recorder.requests) == 3
    assert raised.value.code == "not_caught_up"
    assert raised.value.extra == {"partition": 3}


def test_retries_stop_within_the_total_time() -> None:
    recorder = Recorder(error(503, "log_unavailable"))
    policy = RetryPolicy(attempts=1000, backoff_s=0.05, max_backoff_s=0.1, total_s=0.5)
    started = time.monotonic()
    with client(recorder, retry=policy) as c, pytest.raises(ServiceUnavailableError):
        c.append("u", "c", USER)
    elapsed = time.monotonic() - started
    assert elapsed < 0.5 + 0.3  # no wait is started that would end past total_s
    assert 4 <= len(recorder.requests) < 30


def test_a_retry_after_longer_than_the_time_left_ends_the_retries() -> None:
    recorder = Recorder(error(503, "log_behind_read_models", headers={"Retry-After": "30"}))
    started = time.monotonic()
    with client(recorder, retry=RetryPolicy(total_s=2)) as c, pytest.raises(ServiceUnavailableError) as raised:
        c.events("u", "c")
    assert time.monotonic() - started < 1
    assert len(recorder.requests) == 1
    assert raised.value.retry_after_s == 30


def test_a_retry_after_is_waited_for() -> None:
    recorder = Recorder(error(503, "log_unavailable", headers={"Retry-After": "0.3"}), ok(CONTEXT))
    started = time.monotonic()
    with client(recorder) as c:
        c.context("u", "c", model="gpt-4o", budget_tokens=100)
    assert time.monotonic() - started >= 0.3


def test_the_backoff_doubles_is_jittered_and_capped() -> None:
    policy = RetryPolicy(backoff_s=0.1, max_backoff_s=1.0)
    rng = random.Random(1)
    e = ServiceUnavailableError("x")
    for retry, full in enumerate([0.1, 0.2, 0.4, 0.8, 1.0, 1.0]):
        waits = [policy.wait_s(retry, e, rng) for _ in range(200)]
        assert full / 2 <= min(waits)
        assert max(waits) <= full
        assert max(waits) - min(waits) > full / 4  # jittered, not one value


def test_a_clear_is_retried_only_when_its_request_never_left() -> None:
    recorder = Recorder(error(503, "log_unavailable"), ok(APPENDED, 202))
    with client(recorder) as c, pytest.raises(ServiceUnavailableError):
        c.clear("u", "c")  # may have been stored: a second clear would start another new chat
    assert len(recorder.requests) == 1
    refused = [httpx.ConnectError("refused")]

    def connect_fails_once(request: httpx.Request) -> httpx.Response:
        if refused:
            raise refused.pop()
        return httpx.Response(202, json=APPENDED)

    recorder = Recorder(connect_fails_once)
    with client(recorder) as c:
        assert c.clear("u", "c").offset == 7
    assert len(recorder.requests) == 2


def test_an_erase_is_retried() -> None:
    recorder = Recorder(error(503, "log_unavailable"), ok(APPENDED, 202))
    with client(recorder) as c:
        assert c.erase("u", "c").offset == 7
    assert [r.method for r in recorder.requests] == ["DELETE", "DELETE"]


def test_probes_answer_and_are_never_retried() -> None:
    recorder = Recorder(ok({"ready": False, "projector": "starting"}, 503))
    with client(recorder) as c:
        readiness = c.readyz()
        assert not readiness.ready
        assert readiness.report["projector"] == "starting"
    assert len(recorder.requests) == 1
    with client(Recorder(ok({"status": "ok"}))) as c:
        assert c.healthz()


def test_the_timeout_bounds_each_try() -> None:
    seen: list[dict[str, float | None]] = []

    def slow(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        raise httpx.ReadTimeout("no answer", request=request)

    recorder = Recorder(slow)
    with client(recorder, timeout=1.5) as c, pytest.raises(ClientTimeoutError) as raised:
        c.messages("u", "c")
    assert raised.value.retriable
    assert raised.value.status is None
    assert raised.value.code == "client_timeout"
    assert isinstance(raised.value, UnreachableError)
    assert isinstance(raised.value.__cause__, httpx.ReadTimeout)
    assert len(recorder.requests) == FAST.attempts
    assert seen[0] == {"connect": 1.5, "read": 1.5, "write": 1.5, "pool": 1.5}


def test_by_default_a_try_waits_for_the_answer_longer_than_the_service_waits_for_kafka() -> None:
    seen: list[dict[str, float | None]] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(200, json={"status": "ok"})

    with client(Recorder(record)) as c:
        assert c.healthz()
    read = seen[0]["read"]
    assert read is not None
    assert read > Settings.model_fields["kafka_ack_timeout_s"].default  # a slow append is waited for, not sent again
    assert seen[0] == {"connect": 10.0, "read": read, "write": 10.0, "pool": 10.0}


def test_a_real_timeout_against_a_silent_server() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        retry = RetryPolicy(attempts=2, backoff_s=0.01)
        with ConvlogClient(url, timeout=0.2, retry=retry) as c, pytest.raises(ClientTimeoutError):
            c.messages("u", "c")
        assert 0.4 <= time.monotonic() - started < 2  # two tries of 0.2 s each


def test_the_url_and_token_come_from_the_arguments_else_the_environment() -> None:
    env = {"CONVLOG_URL": "http://env.test:9/", "CONVLOG_TOKEN": "env-token"}
    assert endpoint(None, None, env=env) == ("http://env.test:9", "env-token")
    assert endpoint("http://arg.test", "arg-token", env=env) == ("http://arg.test", "arg-token")
    assert endpoint(None, None, env={}) == ("http://127.0.0.1:8080", None)


def test_the_client_reads_the_environment_when_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVLOG_URL", "http://from-env.test")
    monkeypatch.setenv("CONVLOG_TOKEN", "secret")
    recorder = Recorder(ok({"status": "ok"}))
    with ConvlogClient(transport=httpx.MockTransport(recorder)) as c:
        c.healthz()
    sent = recorder.requests[0]
    assert sent.url.host == "from-env.test"
    assert sent.headers["Authorization"] == "Bearer secret"


def test_ids_are_escaped_into_the_path_and_defaults_stay_out_of_the_query() -> None:
    recorder = Recorder(ok(CONTEXT, headers={"Convlog-Cacheable-Prefix-Tokens": "6"}))
    with client(recorder) as c:
        ctx = c.context("u/1", "c?x", model="claude-sonnet-4", budget_tokens=100, format="anthropic")
    url = recorder.requests[0].url
    assert (
        url.raw_path.decode()
        == "/v1/users/u%2F1/conversations/c%3Fx/context?model=claude-sonnet-4&budget_tokens=100&format=anthropic"
    )
    assert ctx.cacheable_prefix_tokens == 6
    assert ctx.messages == CONTEXT["messages"]
    assert ctx.fragment == {"messages": CONTEXT["messages"]}


async def test_the_async_client_maps_and_retries_the_same() -> None:
    recorder = Recorder(error(503, "log_unavailable"), ok(APPENDED, 202))
    transport = httpx.MockTransport(recorder)
    async with AsyncConvlogClient("http://convlog.test", retry=FAST, transport=transport) as c:
        assert (await c.append("u", "c", USER)).offset == 7
        assert len({r.headers["Idempotency-Key"] for r in recorder.requests}) == 1
        recorder.handlers = [error(422, "invalid_key", field="user_id")]
        with pytest.raises(RejectedEventError) as raised:
            await c.append("u", "c", USER)
        assert raised.value.field == "user_id"
        assert len(recorder.requests) == 3


def test_importing_the_client_loads_no_server_code_and_no_driver() -> None:
    program = (
        "import json, sys; import convlog.client; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True)
    loaded = set(json.loads(result.stdout))
    server = {
        "query_api",
        "projectors",
        "summarizer",
        "fastapi",
        "starlette",
        "uvicorn",
        "aiokafka",
        "psycopg",
        "fastavro",
        "openai",
        "pydantic_settings",
        "tiktoken",
        "structlog",
    }
    assert loaded & server == set()
    assert "httpx" in loaded  # the control: the walk sees what the client does import


def test_the_async_client_has_the_sync_clients_methods_with_the_same_parameters() -> None:
    def methods(cls: type) -> dict[str, list[tuple[str, Any, Any]]]:
        return {
            name: [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]
            for name, f in vars(cls).items()
            if callable(f) and not name.startswith("_") and name not in {"close", "aclose"}
        }

    sync, aio = methods(ConvlogClient), methods(AsyncConvlogClient)
    assert sync == aio
    assert {
        "append",
        "context",
        "messages",
        "message_pages",
        "events",
        "summaries",
        "conversations",
        "conversation_pages",
        "clear",
        "erase",
        "healthz",
        "readyz",
    } <= set(sync)
    for name in sync:
        assert inspect.iscoroutinefunction(getattr(AsyncConvlogClient, name)) or inspect.isasyncgenfunction(
            getattr(AsyncConvlogClient, name)
        ), name


def test_a_base_url_with_a_path_keeps_it() -> None:
    recorder = Recorder(ok({"status": "ok"}))
    with ConvlogClient("http://proxy.test/convlog/", transport=httpx.MockTransport(recorder)) as c:
        c.healthz()
    assert str(recorder.requests[0].url) == "http://proxy.test/convlog/healthz"
