"""Every script in examples/python runs as a user runs it — ``python examples/python/<name>.py``
with ``CONVLOG_URL`` and ``CONVLOG_TOKEN`` set, against a real ``convlog serve`` (the embedded
log, the test Postgres), offline — exits 0, says what it shows, and leaves no connection open
(``-W error``: an unclosed socket is a ``ResourceWarning``). A new example without its
expected lines here fails :func:`test_every_example_is_run`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live_server import TOKEN, convlog_serve_env

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "python"

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

# Lines each example prints (each found at the start of a line of its output, in this order).
EXPECTED: dict[str, list[str]] = {
    "chat_app.py": [
        "convlog at http://127.0.0.1:",
        "assistant: Hello! (sent 2 messages",
        "assistant: Paris. (sent 4 messages",
        "assistant: Ada. (sent 6 messages",  # the model was sent the history: it knows the name
        "the next context: system, user, assistant, user, assistant, user, assistant",
    ],
    "tool_calling.py": [
        "tool call: get_weather({'city': 'Paris'})",
        "tool result: sunny, 21°C in Paris",
        "assistant: It is sunny, 21°C in Paris.",
        "the next context: user -> assistant tool call -> tool -> assistant",
    ],
    "agents_session.py": [
        "assistant: It is sunny in Paris.",
        "assistant: You asked about Paris.",
        "the model was sent 5 items the second time",
        "stored: user, function_call, function_call_output, message, user, message",
    ],
    "pydantic_ai_history.py": [
        "assistant: It is sunny, 21°C in Paris.",
        'assistant: Before this you asked: "What\'s the weather in Paris?"',
        "the next history: 6 messages (SystemPromptPart, UserPromptPart, ToolCallPart, ToolReturnPart, TextPart,",
    ],
    "langchain_history.py": [
        "assistant: Hi Ada!",
        "assistant: You are Ada.",
        "the history in convlog: [\"Hi, I'm Ada.\", 'Hi Ada!', 'Who am I?', 'You are Ada.']",
    ],
    "native_anthropic.py": [
        "appended 4 anthropic payloads",
        "anthropic for claude-sonnet-4-5: 4 messages; dropped: nothing",
        "chat_completions for gpt-4o: 4 messages; dropped: ['reasoning (other_provider)']",
        "responses for gpt-5: 4 input; dropped: ['reasoning (other_provider)']",
        "gemini for gemini-2.5-pro: 4 contents; dropped: ['reasoning (other_provider)']",
        "anthropic for claude-opus-4-1: 4 messages; dropped: ['reasoning (other_model)']",
        "back to claude-sonnet-4-5: its thinking, signature byte-identical: EqQBCkYIBxgCKkA",
    ],
    "native_responses.py": [
        "appended 4 responses payloads",
        "responses for gpt-5: 5 input; dropped: nothing",
        "chat_completions for gpt-4o: 4 messages; dropped: ['reasoning (other_provider)']",
        "anthropic for claude-sonnet-4-5: 4 messages; dropped: ['reasoning (other_provider)']",
        "gemini for gemini-2.5-pro: 4 contents; dropped: ['reasoning (other_provider)']",
        "responses for gpt-4o: 4 input; dropped: ['reasoning (other_model)']",
        "back to gpt-5: user, reasoning, function_call, function_call_output, message",
    ],
    "native_gemini.py": [
        "appended 4 gemini payloads",
        "gemini for gemini-2.5-pro: 4 contents; dropped: nothing",
        "chat_completions for gpt-4o: 4 messages; dropped: ['signature (other_provider)']",  # call and result served
        "anthropic for claude-sonnet-4-5: 4 messages; dropped: ['signature (other_provider)']",
        "responses for gpt-5: 4 input; dropped: ['signature (other_provider)']",
        "gemini for gemini-2.5-flash: 4 contents; dropped: ['signature (other_model)']",
        "back to gemini-2.5-pro: the call with its signature: CiQBcsjafQ==",
    ],
    "operator_rebuild.py": [
        "$ convlog rebuild read_models --new --verify --switch",
        "building version 2 (convlog_read_models_v2) beside live version 1",
        "convlog_read_models_v2 equals convlog_read_models_v1",
        "version 2 is live; version 1 is retired",
        "$ convlog verify",
        "convlog_read_models_v2 equals replay",
        "after the switch: 3 messages, the 2 from before kept",
    ],
}


@pytest.fixture(scope="module")
def service_env(pg_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment of a ``convlog serve`` of this module's own, with ``CONVLOG_URL`` and
    ``CONVLOG_TOKEN`` pointing at it (an operator's command reads the service's settings)."""
    with convlog_serve_env(pg_admin_url, tmp_path_factory.mktemp("serve")) as (url, env):
        yield {**env, "CONVLOG_URL": url, "CONVLOG_TOKEN": TOKEN}


def test_every_example_is_run() -> None:
    """Each script of examples/python has its lines here (``_round_trip.py`` is what three of them share)."""
    assert sorted(p.name for p in EXAMPLES.glob("[!_]*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_example_runs_offline(name: str, service_env: dict[str, str]) -> None:
    env = service_env
    if name != "operator_rebuild.py":  # an app needs the API's address and token, nothing of the service
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONVLOG_")}
        env |= {"CONVLOG_URL": service_env["CONVLOG_URL"], "CONVLOG_TOKEN": TOKEN}
    ran = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLES / name)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Warning" not in ran.stderr, ran.stderr  # ResourceWarning: a client or socket left open
    lines = iter(ran.stdout.splitlines())
    for expected in EXPECTED[name]:
        assert any(line.startswith(expected) for line in lines), (expected, ran.stdout)
