"""Each API call as data — method, path, query, body, headers, which failures may be repeated
and how the answer is read — built once here and run by both clients (``sync.py``,
``aio.py``), which differ only in how they wait. Also the reading of answers: a 2xx body into
its type, any other into the :mod:`convlog.client.errors` class for its status and code."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from convlog.client.errors import (
    BudgetExceededError,
    ClientError,
    ClientTimeoutError,
    ConflictError,
    NotFoundError,
    RejectedEventError,
    RejectedRequestError,
    ServerError,
    ServiceUnavailableError,
    UnauthorizedError,
    UnexpectedResponseError,
    UnreachableError,
)
from convlog.client.retry import Repeat
from convlog.client.types import (
    AppendResult,
    Context,
    Conversation,
    ConversationPage,
    LoggedEvent,
    Readiness,
    SummaryEntry,
    TranscriptMessage,
    TranscriptPage,
    UserErasure,
)

T = TypeVar("T")
CACHEABLE_PREFIX_HEADER = "Convlog-Cacheable-Prefix-Tokens"
_UNAVAILABLE = frozenset({429, 502, 503, 504})
_UNSENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)  # the request never left


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    read: Callable[[httpx.Response], T]
    repeat: Repeat = Repeat.SAFE
    params: Mapping[str, str | int] | None = None
    body: bytes | None = None
    headers: Mapping[str, str] | None = None
    appends: bool = False  # a 413/422 answer is a refused event, not a refused request
    answers: frozenset[int] = frozenset({200, 202})  # statuses read as answers, not errors


def _conversation(user_id: str, conversation_id: str) -> str:
    return f"/v1/users/{quote(user_id, safe='')}/conversations/{quote(conversation_id, safe='')}"


def _json(response: httpx.Response) -> Any:
    try:
        return json.loads(response.content)
    except ValueError as e:
        raise UnexpectedResponseError(
            f"the answer is not JSON: {response.text[:200]!r}", status=response.status_code
        ) from e


def _reader(parse: Callable[[Any], T]) -> Callable[[httpx.Response], T]:
    def read(response: httpx.Response) -> T:
        body = _json(response)
        try:
            return parse(body)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise UnexpectedResponseError(
                f"the answer lacks what this client reads ({e!r}): {str(body)[:200]}", status=response.status_code
            ) from e

    return read


def _params(**given: str | int | bool | None) -> dict[str, str | int]:
    return {k: ("true" if v else "false") if isinstance(v, bool) else v for k, v in given.items() if v is not None}


def append(
    user_id: str,
    conversation_id: str,
    payload: Any,
    *,
    format: str,  # noqa: A002 -- the query parameter's public name
    idempotency_key: str | None,
) -> Call[AppendResult]:
    key = idempotency_key or str(uuid.uuid4())  # made here, once: every retry sends the same one
    return Call(
        "POST",
        _conversation(user_id, conversation_id) + "/messages",
        _reader(AppendResult.from_json),
        params=None if format == "chat_completions" else {"format": format},
        body=json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode(),
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
        appends=True,
    )


def context(
    user_id: str,
    conversation_id: str,
    *,
    model: str,
    budget_tokens: int,
    reserve_tokens: int,
    tools_tokens: int,
    reasoning: str,
    format: str,  # noqa: A002 - the API parameter's name
    cache: bool,
    min_offset: int | None,
    as_of: int | None,
    before_message: str | None,
    editing: Mapping[str, str | int] | None = None,
) -> Call[Context]:
    def read(response: httpx.Response) -> Context:
        prefix = response.headers.get(CACHEABLE_PREFIX_HEADER)
        return _reader(lambda body: Context.from_json(body, cacheable_prefix=prefix))(response)

    params = _params(
        model=model,
        budget_tokens=budget_tokens,
        reserve_tokens=reserve_tokens or None,
        tools_tokens=tools_tokens or None,
        reasoning=None if reasoning == "omit" else reasoning,
        format=None if format == "chat_completions" else format,
        cache=cache or None,
        min_offset=min_offset,
        as_of=as_of,
        before_message=before_message,
    )
    params.update(editing or {})  # clear_tool_results_trigger=..., editing_defaults=ignore (docs/http-api.md)
    return Call("GET", _conversation(user_id, conversation_id) + "/context", read, params=params)


def messages(user_id: str, conversation_id: str, *, limit: int, before: int | None) -> Call[TranscriptPage]:
    def parse(body: Any) -> TranscriptPage:
        return TranscriptPage(tuple(TranscriptMessage.from_json(m) for m in body["messages"]), body["next_before"])

    return Call(
        "GET",
        _conversation(user_id, conversation_id) + "/messages",
        _reader(parse),
        params=_params(limit=limit, before=before),
    )


def summaries(user_id: str, conversation_id: str) -> Call[list[SummaryEntry]]:
    return Call(
        "GET",
        _conversation(user_id, conversation_id) + "/summaries",
        _reader(lambda body: [SummaryEntry.from_json(s) for s in body["summaries"]]),
    )


def events(user_id: str, conversation_id: str) -> Call[list[LoggedEvent]]:
    return Call(
        "GET",
        _conversation(user_id, conversation_id) + "/events",
        _reader(lambda body: [LoggedEvent.from_json(e) for e in body["events"]]),
    )


def conversations(user_id: str, *, limit: int, before: str | None) -> Call[ConversationPage]:
    def parse(body: Any) -> ConversationPage:
        return ConversationPage(tuple(Conversation.from_json(c) for c in body["conversations"]), body["next_before"])

    return Call(
        "GET",
        f"/v1/users/{quote(user_id, safe='')}/conversations",
        _reader(parse),
        params=_params(limit=limit, before=before),
    )


def redact(
    user_id: str, conversation_id: str, message_id: str, *, reason: str | None, idempotency_key: str | None
) -> Call[AppendResult]:
    key = idempotency_key or str(uuid.uuid4())  # once: a retried redaction is the same event
    body = json.dumps({} if reason is None else {"reason": reason}, ensure_ascii=False).encode()
    path = _conversation(user_id, conversation_id) + f"/messages/{quote(message_id, safe='')}/redact"
    return Call(
        "POST",
        path,
        _reader(AppendResult.from_json),
        body=body,
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )


def clear(user_id: str, conversation_id: str) -> Call[AppendResult]:
    return Call(
        "POST",
        _conversation(user_id, conversation_id) + "/clear",
        _reader(AppendResult.from_json),
        repeat=Repeat.UNSENT,
        appends=False,
    )


def erase(user_id: str, conversation_id: str) -> Call[AppendResult]:
    return Call("DELETE", _conversation(user_id, conversation_id), _reader(AppendResult.from_json))


def erase_user(user_id: str) -> Call[UserErasure]:
    return Call("DELETE", f"/v1/users/{quote(user_id, safe='')}", _reader(UserErasure.from_json))


def healthz() -> Call[bool]:
    return Call("GET", "/healthz", _reader(lambda body: body.get("status") == "ok"), repeat=Repeat.NEVER)


def readyz() -> Call[Readiness]:
    return Call(
        "GET",
        "/readyz",
        _reader(lambda body: Readiness(bool(body.get("ready")), body)),
        repeat=Repeat.NEVER,
        answers=frozenset({200, 503}),
    )


def transport_error(e: httpx.TransportError, call: Call[Any]) -> tuple[ClientError, bool]:
    """The client error for a failure without an HTTP answer, and whether the request may have
    reached the service."""
    what = f"{call.method} {call.path}"
    if isinstance(e, httpx.TimeoutException):
        error: ClientError = ClientTimeoutError(f"{what}: no answer in time ({type(e).__name__}: {e})")
    else:
        error = UnreachableError(f"{what}: {type(e).__name__}: {e}")
    return error, not isinstance(e, _UNSENT)


def response_error(response: httpx.Response, call: Call[Any]) -> ClientError:
    """The client error for an answer that is not a success, by status (and code for 422)."""
    status = response.status_code
    code: str | None = None
    message = response.reason_phrase or f"HTTP {status}"
    extra: dict[str, Any] = {}
    try:
        error = json.loads(response.content)["error"]
        code, message = str(error["code"]), str(error["message"])
        extra = {k: v for k, v in error.items() if k not in ("code", "message")}
    except (ValueError, KeyError, TypeError):
        if response.content:
            message = f"{message}: {response.text[:200]}"
    cls: type[ClientError]
    if status in _UNAVAILABLE:
        cls = ServiceUnavailableError
    elif status in (401, 403):
        cls = UnauthorizedError
    elif status == 404:
        cls = NotFoundError
    elif status == 409:
        cls = ConflictError
    elif status == 422 and code == "context_budget_exceeded":
        cls = BudgetExceededError
    elif status in (400, 413, 422):
        cls = RejectedEventError if call.appends else RejectedRequestError
    else:
        cls = ServerError
    retriable = True if extra.get("retriable") is True else None
    return cls(
        message, status=status, code=code, extra=extra, retry_after_s=_retry_after(response), retriable=retriable
    )


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return None if value is None else max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: the backoff decides
