"""What the Agents SDK session tests share: the live ``convlog serve`` of the client's tests
(its ``served`` fixture: the embedded log and the test Postgres) and the session on it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from convlog.client import AsyncConvlogClient
from convlog.integrations.agents import ConvlogSession
from tests.support import free_port
from tests.test_client_live import TOKEN, _ready, served

__all__ = ["TOKEN", "USER", "client", "new_id", "served", "session_on", "summarising"]

USER = "u-agents"


@pytest.fixture
async def client(served: str) -> AsyncIterator[AsyncConvlogClient]:
    async with AsyncConvlogClient(served, token=TOKEN) as c:
        yield c


def new_id(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def session_on(client: AsyncConvlogClient, session_id: str | None = None, **kwargs: object) -> ConvlogSession:
    return ConvlogSession(session_id or new_id(), client=client, user_id=USER, **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def summarising(pg_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``convlog serve`` with the (offline) summarizer on and a window of at most 4 turns (as
    tests/integrations/test_langchain.py starts one)."""
    name = f"convlog_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    data = tmp_path_factory.mktemp("serve-summaries")
    port = free_port()
    env = {**os.environ, "CONVLOG_DATABASE_URL": make_conninfo(pg_admin_url, dbname=name),
           "CONVLOG_DATA_DIR": str(data), "CONVLOG_HTTP_PORT": str(port), "CONVLOG_SUMMARIZER": "on",
           "CONVLOG_WINDOW_MAX_TURNS": "4", "CONVLOG_WINDOW_KEEP_TURNS": "2",
           "CONVLOG_API_TOKENS": f"acme:{TOKEN}"}  # fmt: skip
    for key in ("CONVLOG_KAFKA_BOOTSTRAP", "CONVLOG_LLM_BASE_URL", "OPENAI_BASE_URL"):  # the offline summarizer
        env.pop(key, None)
    with (data / "serve.err").open("wb") as errors:
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
            with psycopg.connect(pg_admin_url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
