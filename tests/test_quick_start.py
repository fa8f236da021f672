"""The quick start works as written: README.md's and docs/getting-started.md's commands, run as a
newcomer pastes them — `convlog serve` on embedded defaults (the embedded log and the embedded
Postgres in a fresh data dir), the two curl commands, the Python client's lines."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from convlog.embedded.postgres import stop_embedded_postgres
from tests.live_server import ready
from tests.support import free_port
from tests.test_pg import require_pg_binaries

REPO = Path(__file__).resolve().parents[1]
README_PORT = "8080"

pytestmark = pytest.mark.slow


def _section(page: str, start: str, end: str | None) -> str:
    text = (REPO / page).read_text(encoding="utf-8").split(start, 1)[1]
    return text.split(end, 1)[0] if end else text


QUICK_STARTS = {
    "README.md": _section("README.md", "\n## Quick start\n", "\n## "),
    "docs/getting-started.md": _section("docs/getting-started.md", "\n## Serve the API\n", "\n## On Kafka"),
}


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def _commands(block: str) -> list[list[str]]:
    """The shell commands of a block: continuation lines joined, the comments showing answers left out."""
    text = re.sub(r"(?m)^\s*#.*\n?", "", block).replace("\\\n", " ")
    return [shlex.split(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def quick_start_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """`convlog serve` started as the quick start says, in a fresh data dir, on a free port."""
    require_pg_binaries()
    [serve_line] = [c for b in _blocks(QUICK_STARTS["README.md"], "sh") for c in _commands(b) if "serve" in c]
    assignments = dict(arg.split("=", 1) for arg in serve_line if "=" in arg and arg.startswith("CONVLOG_"))
    assert serve_line[len(assignments) :] == [".venv/bin/convlog", "serve"], serve_line
    data, port = tmp_path_factory.mktemp("quick-start") / ".convlog", str(free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONVLOG_", "OPENAI_"))}  # embedded defaults
    env |= assignments | {"CONVLOG_DATA_DIR": str(data), "CONVLOG_HTTP_PORT": port}
    data.mkdir(parents=True)
    with (data / "serve.err").open("wb") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "convlog.cli.main", "serve"], env=env, stdout=subprocess.DEVNULL, stderr=errors
        )
    try:
        deadline = time.monotonic() + 120  # the embedded Postgres' first start runs initdb
        while not ready(int(port)):
            assert process.poll() is None, (data / "serve.err").read_text()
            assert time.monotonic() < deadline, "convlog serve did not start"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}", assignments["CONVLOG_API_TOKENS"].split(":", 1)[1]
    finally:
        process.terminate()
        process.wait(30)
        stop_embedded_postgres(data)


@pytest.mark.parametrize("page", list(QUICK_STARTS))
def test_the_quick_start_curl_commands_append_and_read_the_context(
    quick_start_serve: tuple[str, str], page: str
) -> None:
    base, _ = quick_start_serve
    curl = shutil.which("curl")
    assert curl is not None, "the quick start uses curl"
    commands = [c for b in _blocks(QUICK_STARTS[page], "sh") for c in _commands(b) if c[0] == "curl"]
    assert len(commands) == 2, commands
    answers = []
    for command in commands:
        argv = [curl, "--fail-with-body", *(a.replace(f"http://127.0.0.1:{README_PORT}", base) for a in command[1:])]
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        assert done.returncode == 0, f"{shlex.join(command)}\n{done.stdout}{done.stderr}"
        answers.append(json.loads(done.stdout))
    appended, context = answers
    assert isinstance(appended["offset"], int)
    assert context["format"] == "chat_completions"
    assert {"role": "user", "content": "Find me a flight to Lisbon"} in context["messages"]


@pytest.mark.parametrize("page", list(QUICK_STARTS))
def test_the_quick_start_python_lines_run(
    quick_start_serve: tuple[str, str], page: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base, _ = quick_start_serve
    [block] = _blocks(QUICK_STARTS[page], "python")
    assert len(block.strip().splitlines()) <= 10, "the Python example stays ten lines"
    exec(block.replace(f"http://127.0.0.1:{README_PORT}", base), {})  # noqa: S102 - the docs' own example
    assert "And a hotel near the river?" in capsys.readouterr().out
