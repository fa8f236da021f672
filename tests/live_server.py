"""A real ``convlog serve`` process for the tests of what talks to it over HTTP (the client and
the framework adapters): the embedded log, a fresh database on the test Postgres."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.support import free_port

TOKEN = "client-token"  # noqa: S105 -- the test service's token


@contextmanager
def convlog_serve(pg_admin_url: str, data: Path, **settings: str) -> Iterator[str]:
    """The base URL of a ``convlog serve`` on a database of its own; ``settings`` are extra
    ``CONVLOG_*`` variables (``CONVLOG_SUMMARIZER="on"`` runs the offline summarizer)."""
    with convlog_serve_env(pg_admin_url, data, **settings) as (url, _):
        yield url


@contextmanager
def convlog_serve_env(pg_admin_url: str, data: Path, **settings: str) -> Iterator[tuple[str, dict[str, str]]]:
    """:func:`convlog_serve`'s base URL and the environment the process runs with (its database,
    data dir and token): what an operator's command beside it needs."""
    name = f"convlog_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    port = free_port()
    env = {
        **os.environ,
        "CONVLOG_DATABASE_URL": make_conninfo(pg_admin_url, dbname=name),
        "CONVLOG_DATA_DIR": str(data),
        "CONVLOG_HTTP_PORT": str(port),
        "CONVLOG_SUMMARIZER": "off",
        "CONVLOG_API_TOKENS": f"acme:{TOKEN}",
        **settings,
    }
    for key in ("CONVLOG_KAFKA_BOOTSTRAP", "CONVLOG_LLM_BASE_URL", "OPENAI_BASE_URL"):  # embedded log, offline model
        env.pop(key, None)
    with (data / "serve.err").open("wb") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "convlog.cli.main", "serve"], env=env, stdout=subprocess.DEVNULL, stderr=errors
        )
        try:
            deadline = time.monotonic() + 60
            while not ready(port):
                assert process.poll() is None, (data / "serve.err").read_text()
                assert time.monotonic() < deadline, "convlog serve did not start"
                time.sleep(0.1)
            yield f"http://127.0.0.1:{port}", env
        finally:
            process.terminate()
            process.wait(30)
            with psycopg.connect(pg_admin_url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            pass
    except OSError:
        return False
    return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
