"""Reads of the log that end with their client.

A conversation read from the log (the events endpoint, ``as_of`` and ``before_message``
contexts) can take a while on a long partition, and the API's reads share one log reader: one
that goes on after its client has gone only delays the others — and keeps ``convlog serve``
from stopping. So such a read runs while the client is connected, and is cancelled when it
disconnects (ASGI ``http.disconnect``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

from events.errors import ConvlogError

T = TypeVar("T")


class ClientDisconnectedError(ConvlogError):
    """The client went away before its answer was ready; the read was cancelled."""

    code = "client_disconnected"


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """The result of ``work``; cancels it and raises :class:`ClientDisconnectedError` if the
    client disconnects first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.create_task(_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        raise ClientDisconnectedError("the client disconnected; its read of the log was cancelled")
    return task.result()


async def _disconnect(request: Request) -> None:
    """Returns once the client disconnected. A GET's (empty) body is received first; after it
    the ASGI server's next message is the disconnect."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
