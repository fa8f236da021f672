"""The uvicorn server ``convlog serve`` runs, with its connections bounded in time.

uvicorn times out an idle keep-alive connection only after a response (``timeout_keep_alive``),
and any byte received cancels even that; a connection that never completes a request head —
opened and left idle, or fed a header line every few seconds (slowloris) — is kept forever.
uvicorn offers no setting for it, so the h11 protocol is extended with a request-head deadline:
armed when the connection opens and after each response, disarmed when h11 has parsed a whole
request head; when it passes, the connection is closed. Settings:
``CONVLOG_HTTP_KEEP_ALIVE_S`` (default 5: idle between requests) and
``CONVLOG_HTTP_HEADER_TIMEOUT_S`` (default 10: from connect / last response to a complete head).
h11 already refuses a head larger than 16 KiB (uvicorn's ``h11_max_incomplete_event_size``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from convlog.settings import Settings


class _HeadDeadlineProtocol(H11Protocol):
    head_timeout_s = 10.0  # set per server by :func:`server_config`
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_deadline()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # h11 parsed a whole request head: a request runs now
            self._disarm_head_deadline()

    def on_response_complete(self) -> None:
        self._arm_head_deadline()  # before super(): it may start a pipelined request at once
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
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
    head_timeout_s = settings.http_header_timeout_s
    protocol = type("HeadDeadlineProtocol", (_HeadDeadlineProtocol,), {"head_timeout_s": head_timeout_s})
    return uvicorn.Config(
        app,
        host=settings.http_host,
        port=settings.http_port,
        log_level="info",
        http=protocol,
        timeout_keep_alive=settings.http_keep_alive_s,
        timeout_graceful_shutdown=settings.shutdown_grace_s,
    )
