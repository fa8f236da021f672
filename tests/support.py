"""Helpers shared by tests (fixtures live in conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def convlog_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``convlog ARGS`` as a process of its own, with exactly ``env``, from the repository root."""
    return subprocess.run(
        [sys.executable, "-m", "convlog.cli.main", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def unique_topic(prefix: str = "test") -> str:
    return f"{prefix}.{uuid.uuid4().hex[:12]}"


def services_required() -> bool:
    """``.ci/run`` sets this: a missing Kafka or Postgres then fails the run instead of skipping."""
    import os  # noqa: PLC0415

    return os.environ.get("CONVLOG_REQUIRE_SERVICES") == "1" or os.environ.get("CONVLOG_REQUIRE_KAFKA") == "1"


def free_port() -> int:
    """A loopback port nobody listens on right now (for a test's private server)."""
    import socket  # noqa: PLC0415

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
