"""What convlog/runtime/uvicorn_compat.py relies on in uvicorn's internal ``HttpToolsProtocol``,
for the versions it declares (its docstring lists it): the callbacks in their order, the
attributes read, a request's writes through its cycle's transport, and a 400 for a callback
that raises. Served on a real socket by the real protocol, subclassed as convlog serve does."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from convlog.runtime import uvicorn_compat
from convlog.runtime.uvicorn_compat import HttpToolsProtocol
from tests.compat.versions import assert_within


def test_the_installed_uvicorn_is_the_one_written_for() -> None:
    assert_within(uvicorn_compat.DISTRIBUTION, uvicorn_compat.VERSIONS)


Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]


async def _app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


class _Recording(HttpToolsProtocol):
    calls: list[str]
    written: list[bytes]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.calls, self.written = [], []
        super().connection_made(transport)
        assert (self.transport, self.loop) == (transport, asyncio.get_running_loop())
        assert callable(self.flow.resume_reading)
        assert callable(self.logger.debug)

    def on_message_begin(self) -> None:
        self.calls.append("begin")
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self.calls.append(f"url {url.decode()}")
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"x-refuse":
            raise ValueError("refused")
        self.calls.append(f"header {name.decode()}")
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        before = self.cycle
        super().on_headers_complete()
        assert self.cycle is not before  # the new request's cycle
        self.calls.append(f"head, {len(self.pipeline)} queued")
        transport, written = self.cycle.transport, self.written

        class _Writes(asyncio.Transport):
            def write(self, data: bytes | bytearray | memoryview) -> None:
                written.append(bytes(data))
                transport.write(data)

            def is_closing(self) -> bool:
                return transport.is_closing()

            def close(self) -> None:
                transport.close()

        self.cycle.transport = _Writes()

    def on_message_complete(self) -> None:
        self.calls.append("message")
        super().on_message_complete()

    def on_response_complete(self) -> None:
        total = self.server_state.total_requests
        super().on_response_complete()
        self.calls.append(f"response {self.server_state.total_requests - total}")


async def _serve(request: bytes) -> tuple[bytes, _Recording]:
    config = uvicorn.Config(_app, http="httptools", lifespan="off", log_level="warning")
    protocols: list[_Recording] = []

    def protocol() -> _Recording:
        protocols.append(_Recording(config=config, server_state=ServerState(), app_state={}))
        return protocols[-1]

    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    server.close()
    await server.wait_closed()
    return answer, protocols[0]


async def test_the_callbacks_in_order_and_the_response_through_the_cycles_transport() -> None:
    first = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi"
    pipelined = b"GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answer, protocol = await _serve(first + pipelined)
    assert answer.count(b"HTTP/1.1 200 OK") == 2
    first_calls = ["begin", "url /a", "header Host", "header Content-Length", "head, 0 queued", "message"]
    pipelined_calls = ["begin", "url /b", "header Host", "header Connection", "head, 1 queued", "message"]
    assert protocol.calls == [*first_calls, *pipelined_calls, "response 1", "response 1"]
    assert b"".join(protocol.written) == answer


async def test_a_callback_that_raises_is_answered_400() -> None:
    answer, protocol = await _serve(b"GET / HTTP/1.1\r\nHost: x\r\nX-Refuse: 1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 Bad Request")
    assert "head, 0 queued" not in protocol.calls


async def test_send_400_response_answers_and_closes() -> None:
    class _Refusing(_Recording):
        def on_url(self, url: bytes) -> None:
            super().on_url(url)
            self.send_400_response("Request head too large.")

    config = uvicorn.Config(_app, http="httptools", lifespan="off", log_level="warning")
    server = await asyncio.get_running_loop().create_server(
        lambda: _Refusing(config=config, server_state=ServerState(), app_state={}), "127.0.0.1", 0
    )
    reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    server.close()
    await server.wait_closed()
    assert answer.startswith(b"HTTP/1.1 400 Bad Request")
    assert answer.endswith(b"Request head too large.")
