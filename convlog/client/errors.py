"""What a failed call to convlog's HTTP API raises: a :class:`ClientError` of the ConvlogError
tree, chosen by the HTTP status (and, for 422, the server's ``code``).

The class says what kind of failure it was (one per way a caller reacts: retry, fix the
input, re-authenticate, give up on a missing conversation); the instance carries what the
server said: ``code`` is the server's stable code (``not_caught_up``, ``invalid_key``,
``orphan_tool_result``, ...), falling back to the class's own when there was no answer;
``message``, ``status`` (None without an HTTP answer), ``extra`` (the error body's other
fields: ``field``, ``needed``, ``partition``, ...) and ``retry_after_s`` (the ``Retry-After``
header). ``retriable`` is True for 429, 502, 503, 504, an error body that says
``"retriable": true``, a refused or dropped connection and a timeout.

Two classes are also the errors the in-process producer and reads raise for the same input
(:class:`RejectedEventError` an ``InvalidEventError``, :class:`RejectedRequestError` an
``InvalidRequestError``), so an app that moves from the producer to the HTTP API keeps its
``except`` clauses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from events.errors import ConvlogError, InvalidEventError, InvalidRequestError


class ClientError(ConvlogError):
    """A call to convlog's HTTP API failed."""

    code = "client_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        extra: Mapping[str, Any] | None = None,
        retry_after_s: float | None = None,
        retriable: bool | None = None,
    ) -> None:
        shown = f"{status} {code or type(self).code}: {message}" if status is not None else message
        Exception.__init__(self, shown)  # not InvalidEventError's: its message is the server's
        self.message = message
        self.status = status
        if code is not None:
            self.code = code
        self.extra: dict[str, Any] = dict(extra or {})
        self.retry_after_s = retry_after_s
        if retriable is not None:
            self.retriable = retriable
        # InvalidEventError's attributes, for the classes that are one.
        self.field: str | None = self.extra.get("field")
        self.reason = message


class UnreachableError(ClientError):
    """No HTTP answer: the connection was refused, dropped or broke mid-answer. An append may or
    may not have been stored; the client retries it with the same ``Idempotency-Key``."""

    code = "unreachable"
    retriable = True


class ClientTimeoutError(UnreachableError):
    """No answer within the client's timeout (connect, write, read or pool)."""

    code = "client_timeout"
    retriable = True


class ServiceUnavailableError(ClientError):
    """429, 502, 503 or 504: the service (or a proxy before it) cannot answer now — the log or
    Postgres is down, the read models have not reached ``min_offset`` (``not_caught_up``), the
    service is not ready. Trying again later can succeed."""

    code = "service_unavailable"
    retriable = True


class UnauthorizedError(ClientError):
    """401 or 403: no token, or one the service does not know."""

    code = "unauthorized"


class NotFoundError(ClientError):
    """404: no such conversation for this tenant (``not_found``), no such message for
    ``before_message`` (``unknown_message``) or to redact (``message_not_found``)."""

    code = "not_found"


class ConflictError(ClientError):
    """409: ``idempotency_key_reused`` (the key was used for another body; ``extra`` has the
    first append's ``event_id``, ``partition``, ``offset``), ``idempotency_key_erased`` (its
    append was erased or redacted since, whatever the body), ``conversation_parked`` (a
    ``min_offset`` past the dead letter that parks it; ``extra`` names it) or ``undecodable_record``."""

    code = "conflict"


class RejectedEventError(ClientError, InvalidEventError):
    """413 or 422 on an append: the message or native payload breaks a rule (``code`` says which:
    ``invalid_event``, ``invalid_key``, ``event_too_large``, a native format's rule, ...;
    ``field`` where). Nothing was stored. Also an ``InvalidEventError``."""

    code = "rejected_event"


class RejectedRequestError(ClientError, InvalidRequestError):
    """400, 413 or 422 on a read or a clear: an argument the service cannot take (``code``
    ``invalid_request``, ``offset_beyond_log_end``, ...; ``field`` names it). Also an
    ``InvalidRequestError``."""

    code = "rejected_request"


class BudgetExceededError(ClientError):
    """422 ``context_budget_exceeded``: even the current question does not fit the budget;
    ``needed`` and ``available`` tokens say by how much."""

    code = "budget_exceeded"

    @property
    def needed(self) -> int | None:
        value = self.extra.get("needed")
        return value if isinstance(value, int) else None

    @property
    def available(self) -> int | None:
        value = self.extra.get("available")
        return value if isinstance(value, int) else None


class ServerError(ClientError):
    """Another status (a 500 is a bug of the service: retrying the same call does not help)."""

    code = "server_error"


class UnexpectedResponseError(ClientError):
    """An answer that is not the API's: a body that is not JSON or lacks the fields this client
    reads (a proxy's page, another service on that URL, an incompatible version)."""

    code = "unexpected_response"
