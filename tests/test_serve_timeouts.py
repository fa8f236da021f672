"""A real ``convlog serve`` closes connections that hold it without finishing a request: one opened
and left idle, one trickling a request head or body, one idle after its response — and a body it
refuses unread still gets its answer to the client (raw sockets)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.projection_support import temporary_database
from tests.support import free_port

pytestmark = pytest.mark.postgres

HEAD_TIMEOUT_S = 1.0
KEEP_ALIVE_S = 1
BODY_TIMEOUT_S = 2.0
APPEND = "POST /v1/users/u/conversations/c/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n"


@pytest.fixture
async def server(pg_admin_url: str, tmp_path: Path) -> AsyncIterator[int]:
    async with temporary_database(pg_admin_url) as url:
        port = free_port()
        env = {
            **os.environ,
            "CONVLOG_DATABASE_URL": url,
            "CONVLOG_DATA_DIR": str(tmp_path),
            "CONVLOG_HTTP_PORT": str(port),
            "CONVLOG_HTTP_HEADER_TIMEOUT_S": str(HEAD_TIMEOUT_S),
            "CONVLOG_HTTP_KEEP_ALIVE_S": str(KEEP_ALIVE_S),
            "CONVLOG_HTTP_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
            "CONVLOG_SUMMARIZER": "off",
            "CONVLOG_API_TOKENS": "acme:t",
        }
        env.pop("CONVLOG_KAFKA_BOOTSTRAP", None)
        errors = (tmp_path / "serve.err").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "convlog.cli.main", "serve"], env=env, stdout=subprocess.DEVNULL, stderr=errors
        )
        try:
            deadline = time.monotonic() + 60
            while not _answers(port):
                assert process.poll() is None, (tmp_path / "serve.err").read_text()
                assert time.monotonic() < deadline, "convlog serve did not start"
                time.sleep(0.1)
            yield port
        finally:
            process.terminate()
            process.wait(30)
            errors.close()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return sock.recv(100).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def _closed_after(sock: socket.socket, *, limit_s: float) -> float:
    """Seconds until the server closed ``sock`` (reading and dropping what it sends)."""
    started = time.monotonic()
    sock.settimeout(limit_s)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass  # closed while we were still sending: the kernel answers with a reset
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for more than {limit_s} s")
    return time.monotonic() - started


def test_idle_and_slow_connections_are_closed(server: int) -> None:
    with socket.create_connection(("127.0.0.1", server)) as idle:  # opened, never a byte sent
        assert _closed_after(idle, limit_s=HEAD_TIMEOUT_S + 4) >= HEAD_TIMEOUT_S * 0.9

    with socket.create_connection(("127.0.0.1", server)) as slow:  # a header line now and then
        started = time.monotonic()
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")
        try:
            for i in range(12):
                time.sleep(0.25)
                slow.sendall(f"X-Slow-{i}: still typing\r\n".encode())
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while trickling: what we want
        _closed_after(slow, limit_s=5)
        assert time.monotonic() - started < 3.0 + 1.5

    with socket.create_connection(("127.0.0.1", server)) as kept:  # a request, then silence
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        kept.settimeout(5)
        assert kept.recv(4096).startswith(b"HTTP/1.1 200")
        assert _closed_after(kept, limit_s=KEEP_ALIVE_S + 4) < KEEP_ALIVE_S + 2

    with socket.create_connection(("127.0.0.1", server)) as ok:  # a prompt client is served as always
        ok.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        ok.settimeout(5)
        assert ok.recv(4096).startswith(b"HTTP/1.1 200")


def test_an_oversized_request_head_is_refused(server: int) -> None:
    """llhttp bounds no head: more than 16 KiB of it is answered 400, streamed or whole."""
    big = b"X-Big: " + b"a" * (17 * 1024) + b"\r\n"
    with socket.create_connection(("127.0.0.1", server)) as whole:
        whole.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n")
        whole.settimeout(5)
        assert whole.recv(4096).startswith(b"HTTP/1.1 400")
    with socket.create_connection(("127.0.0.1", server)) as streamed:  # a header that never ends
        streamed.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        try:
            for _ in range(40):
                streamed.sendall(b"a" * 1024)
                time.sleep(0.005)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused while sending
        streamed.settimeout(5)
        assert _closed_after(streamed, limit_s=HEAD_TIMEOUT_S * 0.5) < HEAD_TIMEOUT_S * 0.5
    with socket.create_connection(("127.0.0.1", server)) as fitting:  # a large head within the bound
        fitting.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (12 * 1024) + b"\r\n\r\n")
        fitting.settimeout(5)
        assert fitting.recv(4096).startswith(b"HTTP/1.1 200")


def _answer(sock: socket.socket, *, limit_s: float) -> bytes:
    """Everything the server sends until it closes ``sock``."""
    sock.settimeout(limit_s)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def test_a_trickled_body_is_answered_408_and_closed(server: int) -> None:
    """A body sent a byte at a time holds its connection only until the body's deadline."""
    with socket.create_connection(("127.0.0.1", server)) as slow:
        started = time.monotonic()
        slow.sendall(f"{APPEND}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{".encode())
        slow.settimeout(0.2)
        answer = b""
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            while not answer and time.monotonic() - started < BODY_TIMEOUT_S + 3:
                slow.sendall(b" ")
                with contextlib.suppress(TimeoutError):
                    answer = slow.recv(65536)
        answer += _answer(slow, limit_s=2)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b'"body_timeout"' in answer
        assert b"connection: close" in answer.lower()
        assert BODY_TIMEOUT_S * 0.9 <= time.monotonic() - started < BODY_TIMEOUT_S + 2


@pytest.mark.parametrize("connection", ["close", "keep-alive"])
def test_an_oversized_body_still_being_sent_gets_its_413(server: int, connection: str) -> None:
    """The 413 is answered as soon as the head says too much is coming; the rest of the body,
    sent after it, is read and discarded, so the client's write does not break and it reads the
    413 (with ``Connection: close``) — instead of a reset that discards it."""
    size = 3 * 1024 * 1024
    with socket.create_connection(("127.0.0.1", server)) as big:
        big.sendall(f"{APPEND}Content-Length: {size}\r\nConnection: {connection}\r\n\r\n".encode() + b"x" * 65536)
        time.sleep(0.5)  # the server has answered by now, the body's rest still to come
        big.sendall(b"x" * (size - 65536))
        _assert_413(_answer(big, limit_s=BODY_TIMEOUT_S + 2))


def test_an_oversized_chunked_body_gets_its_413_too(server: int) -> None:
    """No length declared: the 413 comes once the body passed the limit, while the rest of it is
    still being sent."""
    chunk = b"x" * 65536
    with socket.create_connection(("127.0.0.1", server)) as big:
        big.sendall(f"{APPEND}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n".encode())
        for _ in range(48):  # 3 MiB
            big.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            time.sleep(0.005)
        big.sendall(b"0\r\n\r\n")
        _assert_413(_answer(big, limit_s=BODY_TIMEOUT_S + 2))


def _assert_413(answer: bytes) -> None:
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"payload_too_large"' in answer
    assert b"connection: close" in answer.lower()
