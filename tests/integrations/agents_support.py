"""What the Agents SDK session tests share: a ``convlog serve`` of their module's own (the
embedded log, the test Postgres, as tests/test_client_live.py starts it) and the session on it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from convlog.client import AsyncConvlogClient
from convlog.integrations.agents import ConvlogSession
from tests.support import free_port

TOKEN = "agents-token"  # noqa: S105 -- the test service's token
USER = "u-agents"


@pytest.fixture(scope="module")
def served(pg_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a ``convlog serve`` process of this module's own, on a fresh database."""
    name = f"convlog_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    data = tmp_path_factory.mktemp("serve")
    port = free_port()
    env = {**os.environ, "CONVLOG_DATABASE_URL": make_conninfo(pg_admin_url, dbname=name),
           "CONVLOG_DATA_DIR": str(data), "CONVLOG_HTTP_PORT": str(port), "CONVLOG_SUMMARIZER": "off",
           "CONVLOG_API_TOKENS": f"acme:{TOKEN}"}  # fmt: skip
    env.pop("CONVLOG_KAFKA_BOOTSTRAP", None)
    errors = (data / "serve.err").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "convlog.cli.main", "serve"], env=env,
                               stdout=subprocess.DEVNULL, stderr=errors)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not _ready(port):
            assert process.poll() is None, (data / "serve.err").read_text()
            assert time.monotonic() < deadline, "convlog serve did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(30)
        errors.close()
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
    except OSError:
        return False
    return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200


@pytest.fixture
async def client(served: str) -> AsyncIterator[AsyncConvlogClient]:
    async with AsyncConvlogClient(served, token=TOKEN) as c:
        yield c


def new_id(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def session_on(client: AsyncConvlogClient, session_id: str | None = None, **kwargs: object) -> ConvlogSession:
    return ConvlogSession(session_id or new_id(), client=client, user_id=USER, **kwargs)  # type: ignore[arg-type]
