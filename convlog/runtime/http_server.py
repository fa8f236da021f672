"""The uvicorn server ``convlog serve`` runs, with its connections bounded in time and size.

uvicorn parses HTTP with httptools (llhttp, in C) and runs on uvloop (``convlog serve`` makes
the loop): measured by ``bench/http_path.py``, the pair with the access log off cuts the stack's
cost above a bare socket round trip by a third to a half (h11, pure Python, on asyncio's loop before).

uvicorn times out an idle keep-alive connection only after a response (``timeout_keep_alive``),
and any byte received cancels even that; a connection that never completes a request head —
opened and left idle, or fed a header line every few seconds (slowloris) — is kept forever.
uvicorn offers no setting for it, so the protocol is extended with a request-head deadline:
armed when the connection opens and after each response, disarmed when a whole request head is
parsed; when it passes, the connection is closed. llhttp sets no bound on a head's size (h11
refused more than 16 KiB), so the protocol also counts the bytes received while a head is
incomplete and answers 400 past ``MAX_HEAD_BYTES``. Settings: ``CONVLOG_HTTP_KEEP_ALIVE_S``
(default 5: idle between requests) and ``CONVLOG_HTTP_HEADER_TIMEOUT_S`` (default 10: from
connect / last response to a complete head).

A body is bounded in time by the API (408 ``body_timeout`` past ``CONVLOG_HTTP_BODY_TIMEOUT_S``,
default 30, from its head: query_api/http/middleware.py). uvicorn closes a connection as soon as
the response that says ``Connection: close`` is written — a 413 or 401 answered before the body
was read among them — and a socket closed with received bytes unread, or receiving more, makes
the kernel send a reset, which can discard the answer before the client reads it and breaks
its write (the client sees a broken pipe, not the 413). So the close waits: the protocol reads
and discards the rest of that body, until it ends, the body's deadline passes, nothing came for
the request-head timeout or ``MAX_DISCARDED_BYTES`` were thrown away, and then closes.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import uvicorn

from convlog.runtime.uvicorn_compat import HttpToolsProtocol
from convlog.settings import Settings
from events.errors import ConfigurationError, ConvlogError

MAX_HEAD_BYTES = 16 * 1024  # h11's default bound, kept with llhttp
MAX_DISCARDED_BYTES = 16 * 1024 * 1024  # of a refused body, read before its connection closes


class _HeadTooLargeError(ConvlogError, ValueError):
    """Raised inside the HTTP parser's callback: the parser fails, and uvicorn answers 400."""

    code = "request_head_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(f"a request head may be at most {limit} bytes")


class _CloseAfterBody(asyncio.Transport):
    """The connection as a request's cycle sees it: its close lets the protocol read the rest
    of the request's body first (see the module)."""

    def __init__(self, protocol: _BoundedHeadProtocol) -> None:
        super().__init__()
        self._protocol, self._transport = protocol, protocol.transport

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._transport.write(data)

    def is_closing(self) -> bool:
        return self._protocol.closing_after_body or self._transport.is_closing()

    def close(self) -> None:
        self._protocol.close_after_body()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)


class _BoundedHeadProtocol(HttpToolsProtocol):  # uvicorn internals: what is relied on is listed in uvicorn_compat.py
    head_timeout_s = 10.0  # set per server by :func:`server_config`
    body_timeout_s = 30.0  # likewise
    _head_timer: asyncio.TimerHandle | None = None
    _head_bytes = 0  # received while the current request head is incomplete
    _head_parsed = 0  # bytes of the current head's URL and headers the parser handed over
    _in_head = False  # the parser began a message whose head it has not finished
    _in_body = False  # the parser finished a head and not yet its message
    _body_deadline = 0.0  # (loop time) when the current body must have arrived
    closing_after_body = False  # a response asked to close: the body's rest is read, then the connection closed
    _discarded = 0  # bytes received since
    _discarding_at = 0.0  # (loop time) when the last of them came
    _discard_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        if self.closing_after_body:
            self._discarded += len(data)
            self._discarding_at = self.loop.time()
            if self._discarded > MAX_DISCARDED_BYTES:
                self._close_now()
                return
        super().data_received(data)
        if self._in_head:  # the whole chunk is counted: at worst it also ended the previous body
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self.send_400_response("Request head too large.")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes, self._head_parsed = True, 0, 0

    def on_url(self, url: bytes) -> None:
        self._count_parsed(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_parsed(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count_parsed(self, size: int) -> None:
        """A head that arrived whole in one chunk is bounded too: raising here makes the parser
        fail, and uvicorn answers 400 and closes."""
        self._head_parsed += size
        if self._head_parsed > MAX_HEAD_BYTES:
            raise _HeadTooLargeError(MAX_HEAD_BYTES)

    def on_headers_complete(self) -> None:
        if self.closing_after_body:  # a request sent after the one whose answer closes: never run
            return
        self._in_head, self._in_body = False, True
        self._body_deadline = self.loop.time() + self.body_timeout_s
        self._disarm_head_deadline()  # a request runs now (or waits behind a pipelined one)
        cycle = self.cycle
        super().on_headers_complete()
        if self.cycle is not cycle:  # (not for an upgrade)
            self.cycle.transport = _CloseAfterBody(self)

    def on_message_complete(self) -> None:
        self._in_body = False
        super().on_message_complete()
        if self.closing_after_body:
            self._close_now()

    def on_response_complete(self) -> None:
        if self.closing_after_body:  # no keep-alive, no pipelined request: the connection ends
            self.server_state.total_requests += 1
            return
        if not self.pipeline:  # else super() starts a request whose head is already complete
            self._arm_head_deadline()  # before super(), which may close the transport
        super().on_response_complete()

    def close_after_body(self) -> None:
        """Closes the connection once the current request's body has wholly arrived (or its
        deadline passed, or too much of it did): at once when it has."""
        remaining = self._body_deadline - self.loop.time()
        if self.closing_after_body or self.transport.is_closing():
            return
        if not self._in_body or remaining <= 0:
            self.transport.close()
            return
        self.closing_after_body = True
        self._disarm_head_deadline()
        self.flow.resume_reading()  # paused if the unread body had filled the buffer
        self._discarding_at = self.loop.time()
        self._discard_timer = self.loop.call_later(min(remaining, self.head_timeout_s), self._discard_deadline)

    def _discard_deadline(self) -> None:
        """Stops discarding at the body's deadline, or once the client sent nothing for the
        request-head timeout (a client that declared a body it is not sending)."""
        now = self.loop.time()
        idle_until = self._discarding_at + self.head_timeout_s
        if now >= min(idle_until, self._body_deadline):
            self._close_now()
        else:
            self._discard_timer = self.loop.call_at(min(idle_until, self._body_deadline), self._discard_deadline)

    def _close_now(self) -> None:
        if self._discard_timer is not None:
            self._discard_timer.cancel()
            self._discard_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        if self._discard_timer is not None:
            self._discard_timer.cancel()
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_deadline_passed)

    def _disarm_head_deadline(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_deadline_passed(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.logger.debug("closing a connection that sent no complete request head in %ss", self.head_timeout_s)
            self.transport.close()


def server_config(app: Any, settings: Settings) -> uvicorn.Config:
    """uvicorn's configuration from the ``CONVLOG_HTTP_*`` settings. Once told to stop, the
    server lets requests in flight finish for at most ``CONVLOG_SHUTDOWN_GRACE_S`` seconds
    (default 10), then cancels them: no request — a long read of the log included — keeps the
    process from stopping."""
    timeouts = {"head_timeout_s": settings.http_header_timeout_s, "body_timeout_s": settings.http_body_timeout_s}
    protocol = type("BoundedHeadProtocol", (_BoundedHeadProtocol,), timeouts)
    return uvicorn.Config(
        app,
        host=settings.http_host,
        port=settings.http_port,
        log_level="info",
        access_log=False,  # CONVLOG_HTTP_ACCESS_LOG is the API's own line (`http.request`): the token's id, no path
        http=protocol,
        timeout_keep_alive=settings.http_keep_alive_s,
        timeout_graceful_shutdown=settings.shutdown_grace_s,
    )


def listening_socket(settings: Settings) -> socket.socket:
    """The socket ``convlog serve`` will listen on, bound before anything else starts (the
    embedded Postgres, the log): an address that cannot be had is a :class:`ConfigurationError`
    (exit 2, naming it) with nothing started, not uvicorn's exit 3 after everything was. Bound
    only: the server listens once the service runs (no connection is accepted before)."""
    host, port = settings.http_host, settings.http_port
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ConfigurationError(
            f"convlog serve cannot listen on {host}:{port} (CONVLOG_HTTP_HOST, CONVLOG_HTTP_PORT): {e.strerror or e}"
        ) from e
    return sock
