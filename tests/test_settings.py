"""Settings: one declaration, read from the environment, one clear error per bad value."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from convlog.cli.main import main
from convlog.settings import Settings, SettingsError, describe, unknown_variables
from projectors.window import WindowPolicy

REPO = Path(__file__).resolve().parent.parent


def test_unset_or_empty_gives_the_defaults_and_values_keep_their_type() -> None:
    assert Settings.from_env({}) == Settings()
    assert Settings.from_env({"CONVLOG_TOPIC": "", "CONVLOG_PARTITIONS": ""}) == Settings()
    settings = Settings.from_env(
        {"CONVLOG_PARTITIONS": "3", "CONVLOG_VERSION_POLL_S": "0.25", "CONVLOG_DATA_DIR": "/srv/convlog"}
    )
    assert (settings.partitions, settings.version_poll_s, settings.data_dir) == (3, 0.25, Path("/srv/convlog"))


def test_settings_built_in_code_read_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVLOG_TOPIC", "from.env")
    assert Settings().topic == "convlog.events"
    assert Settings(partitions=2).topic == "convlog.events"
    assert Settings.from_env().topic == "from.env"


@pytest.mark.parametrize(
    ("variable", "raw", "message"),
    [
        ("CONVLOG_PARTITIONS", "0", "CONVLOG_PARTITIONS='0': input should be greater than or equal to 1"),
        ("CONVLOG_HTTP_PORT", "ten", "CONVLOG_HTTP_PORT='ten': input should be a valid integer"),
        ("CONVLOG_HTTP_PORT", "70000", "CONVLOG_HTTP_PORT='70000': input should be less than or equal to 65535"),
        ("CONVLOG_LLM_TIMEOUT_S", "soon", "CONVLOG_LLM_TIMEOUT_S='soon': input should be a valid number"),
        ("CONVLOG_WINDOW_MAX_TURNS", "many", "CONVLOG_WINDOW_MAX_TURNS='many': input should be a valid integer"),
        ("CONVLOG_SUMMARIZER_START", "now", "CONVLOG_SUMMARIZER_START='now': input should be 'earliest' or 'latest'"),
        ("CONVLOG_SUMMARIZER", "maybe", "CONVLOG_SUMMARIZER='maybe': input should be 'on' or 'off'"),
        ("CONVLOG_PROJECTOR", "no", "CONVLOG_PROJECTOR='no': input should be 'on' or 'off'"),
        ("CONVLOG_LOG_LEVEL", "loud", "CONVLOG_LOG_LEVEL='loud': input should be 'debug', 'info'"),
        ("CONVLOG_SUMMARY_MAX_TOKENS", "8", "CONVLOG_SUMMARY_MAX_TOKENS='8': input should be greater than or equal"),
    ],
)
def test_a_bad_value_is_one_error_naming_the_variable_the_value_and_what_was_expected(
    variable: str, raw: str, message: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({variable: raw})
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CONVLOG_TOPIC", "../../elsewhere"),  # the embedded log's file is named after the topic
        ("CONVLOG_TOPIC", "a" * 250),  # Kafka's limit
        ("CONVLOG_PARTITIONS", str(10**20)),  # the embedded log's header holds a u32
    ],
)
def test_a_topic_or_partition_count_no_log_can_hold_is_a_settings_error(variable: str, value: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        Settings.from_env({variable: value})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            "o200k_base,p50k_base",
            "CONVLOG_TOKEN_ENCODINGS='o200k_base,p50k_base': unknown token encoding 'p50k_base': "
            "convlog counts tokens with o200k_base or cl100k_base",
        ),
        ("cl100k", "CONVLOG_TOKEN_ENCODINGS='cl100k': unknown token encoding 'cl100k'"),
        (" , ", "CONVLOG_TOKEN_ENCODINGS=' , ': name at least one token encoding to count"),
    ],
)
def test_an_unknown_token_encoding_is_refused_at_start(
    raw: str, message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"CONVLOG_TOKEN_ENCODINGS": raw})
    assert str(caught.value).startswith(message)
    monkeypatch.setenv("CONVLOG_TOKEN_ENCODINGS", raw)
    assert main(["project"]) == 2  # before the projector loads an encoding or reads a record
    assert capsys.readouterr().err.startswith(f"convlog: error: {message}")


def test_token_encodings_are_a_list_in_order_each_once() -> None:
    assert Settings().counted_encodings() == ("o200k_base",)
    both = Settings.from_env({"CONVLOG_TOKEN_ENCODINGS": " cl100k_base , o200k_base,cl100k_base "})
    assert both.counted_encodings() == ("cl100k_base", "o200k_base")
    assert both.token_encodings == "cl100k_base,o200k_base"  # noqa: S105 -- as `convlog config` shows it, no secret


def test_several_bad_values_are_named_in_one_error() -> None:
    with pytest.raises(SettingsError, match=r"CONVLOG_PARTITIONS='0'.*; CONVLOG_HTTP_PORT='x'"):
        Settings.from_env({"CONVLOG_PARTITIONS": "0", "CONVLOG_HTTP_PORT": "x"})


def test_a_bad_secret_is_named_but_not_shown() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env({"CONVLOG_API_TOKENS": "acme-secret-token"})
    assert str(caught.value) == "CONVLOG_API_TOKENS=****: expected tenant_a:token_a,tenant_b:token_b"


def test_the_window_settings_must_agree() -> None:
    assert Settings.from_env({"CONVLOG_WINDOW_MAX_TURNS": "4", "CONVLOG_WINDOW_KEEP_TURNS": "2"}).window_policy() == (
        WindowPolicy(4, 2)
    )
    with pytest.raises(SettingsError, match=r"CONVLOG_WINDOW_KEEP_TURNS \(13\) <= CONVLOG_WINDOW_MAX_TURNS \(12\)"):
        Settings.from_env({"CONVLOG_WINDOW_KEEP_TURNS": "13"})  # one more than the default maximum


def test_switches_ignore_case_and_spaces() -> None:
    assert Settings.from_env({}).summarizer_start == "earliest"
    assert Settings.from_env({"CONVLOG_SUMMARIZER_START": " Latest "}).summarizer_start == "latest"
    assert Settings.from_env({"CONVLOG_SUMMARIZER": "OFF"}).summarizer == "off"
    assert Settings.from_env({"CONVLOG_PROJECTOR": "Off"}).projector == "off"
    assert Settings.from_env({"CONVLOG_LLM_BASE_URL": "  "}).llm_base_url is None


def test_the_llm_key_falls_back_to_openai_api_key() -> None:
    fallback = Settings.from_env({"OPENAI_API_KEY": "sk-openai"})
    assert fallback.llm_api_key is not None
    assert fallback.llm_api_key.get_secret_value() == "sk-openai"
    both = Settings.from_env({"OPENAI_API_KEY": "sk-openai", "CONVLOG_LLM_API_KEY": "sk-convlog"})
    assert both.llm_api_key is not None
    assert both.llm_api_key.get_secret_value() == "sk-convlog"
    [line] = [line for line in describe(fallback) if line.variable == "CONVLOG_LLM_API_KEY"]
    assert (line.value, line.source) == ("****", "environment (OPENAI_API_KEY)")


def test_tokens_map_to_tenants() -> None:
    assert Settings(api_tokens="acme:t1, globex:t2").token_tenants() == {"t1": "acme", "t2": "globex"}
    assert Settings().token_tenants() == {}


def test_a_child_process_environment_gives_exactly_these_settings() -> None:
    settings = Settings(topic="t", partitions=3, version_poll_s=0.5, api_tokens="a:b", window_keep_turns=2)
    assert Settings.from_env(settings.as_env()).model_dump() == settings.model_dump()
    inherited = {"CONVLOG_KAFKA_BOOTSTRAP": "elsewhere:9092", "CONVLOG_TOPIC": "other"}
    assert Settings.from_env({**inherited, **Settings().as_env()}).model_dump() == Settings().model_dump()  # unset wins


def test_describe_masks_secrets_and_says_where_each_value_came_from() -> None:
    settings = Settings.from_env(
        {
            "CONVLOG_DATABASE_URL": "postgresql://convlog:hunter2@db.example:5432/convlog",
            "CONVLOG_API_TOKENS": "acme:tok-a,globex:tok-b",
            "CONVLOG_LLM_API_KEY": "sk-live",
            "CONVLOG_PARTITIONS": "3",
        }
    )
    lines = {line.variable: line for line in describe(settings)}
    assert set(lines) >= {"CONVLOG_DATABASE_URL", "CONVLOG_TOPIC", "JAVA_HOME"}
    assert lines["CONVLOG_DATABASE_URL"].value == "postgresql://convlog:****@db.example:5432/convlog"
    assert lines["CONVLOG_API_TOKENS"].value == "acme:****,globex:****"
    assert lines["CONVLOG_LLM_API_KEY"].value == "****"
    assert (lines["CONVLOG_PARTITIONS"].value, lines["CONVLOG_PARTITIONS"].source) == ("3", "environment")
    assert (lines["CONVLOG_TOPIC"].value, lines["CONVLOG_TOPIC"].source) == ("convlog.events", "default")
    assert (lines["CONVLOG_METRICS_PORT"].value, lines["CONVLOG_METRICS_PORT"].source) == ("unset", "default")
    text = json.dumps([line.value for line in lines.values()])
    assert "hunter2" not in text
    assert "tok-a" not in text
    assert "sk-live" not in text


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://convlog:pw@[::1]:5432/db", "postgresql://convlog:****@[::1]:5432/db"),
        ("postgresql://convlog@h1:5432,h2:5432/db", "postgresql://convlog@h1:5432,h2:5432/db"),
        (
            "postgresql://h/db?user=u&password=pw&sslmode=require",
            "postgresql://h/db?user=u&password=****&sslmode=require",
        ),
        ("host=db user=u password='p w' dbname=convlog", "host=db user=u password=**** dbname=convlog"),
        ("postgresql://x:y@[::1", "<unparsable database URL>"),  # not a traceback, and no password shown
    ],
)
def test_the_database_password_is_masked_in_every_spelling(url: str, shown: str) -> None:
    assert {line.variable: line.value for line in describe(Settings(database_url=url))}["CONVLOG_DATABASE_URL"] == shown


def test_unknown_convlog_variables_are_found() -> None:
    env = {"CONVLOG_WINDOW_MAXTURNS": "4", "CONVLOG_TOPIC": "t", "OPENAI_API_KEY": "k", "HOME": "/"}
    assert unknown_variables(env) == ["CONVLOG_WINDOW_MAXTURNS"]


def _config(*args: str) -> str:
    """``convlog config`` in a process of its own, with an environment of ours."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("CONVLOG_") and k not in {"OPENAI_API_KEY", "JAVA_HOME"}
    }
    env |= {
        "CONVLOG_DATABASE_URL": "postgresql://convlog:hunter2@127.0.0.1:15432/convlog",
        "CONVLOG_TOPIC": "my.topic",
        "CONVLOG_TOPICS": "typo",
    }
    done = subprocess.run(
        [sys.executable, "-m", "convlog.cli.main", "config", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stderr == "convlog config: CONVLOG_TOPICS is not a convlog setting (ignored)\n"
    return done.stdout


def test_convlog_config_prints_the_effective_configuration() -> None:
    out = _config()
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert rows["CONVLOG_TOPIC"] == ["my.topic", "environment"]
    assert rows["CONVLOG_PARTITIONS"] == ["12", "default"]
    assert rows["CONVLOG_DATABASE_URL"] == ["postgresql://convlog:****@127.0.0.1:15432/convlog", "environment"]
    assert "hunter2" not in out
    parsed = {row["variable"]: row for row in map(json.loads, _config("--json").splitlines())}
    assert (parsed["CONVLOG_TOPIC"]["value"], parsed["CONVLOG_TOPIC"]["source"]) == ("my.topic", "environment")
    assert parsed["CONVLOG_TOPIC"]["doc"] == "the event topic (created if missing)"


@pytest.mark.parametrize(
    "argv", [["config"], ["serve"], ["project"], ["migrate"], ["positions"], ["events", "a:b:c"], ["stop"]]
)
def test_a_bad_value_stops_every_command_with_exit_2_and_one_line(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONVLOG_HTTP_PORT", "eighty")
    assert main(argv) == 2  # before logging is configured and before the command runs
    captured = capsys.readouterr()
    assert (
        captured.err == "convlog: error: CONVLOG_HTTP_PORT='eighty': input should be a valid integer, "
        "unable to parse string as an integer\n"
    )
    assert captured.out == ""


def _environment_reads(path: Path) -> list[str]:
    """``os.environ`` / ``environ`` / ``getenv`` in ``path``'s code (not in its docstrings)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in {"environ", "getenv", "environb", "getenvb"}:
            found.append(f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}: {name}")
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [f"{path.relative_to(REPO)}: from os import {a.name}" for a in node.names if "env" in a.name]
    return found


def test_only_the_settings_module_reads_the_environment() -> None:
    modules = [
        p
        for package in ("events", "projectors", "query_api", "summarizer", "pgstore", "convlog")
        for p in sorted((REPO / package).rglob("*.py"))
    ]
    # The client is a library of its own: it names the service it calls (CONVLOG_URL, CONVLOG_TOKEN),
    # no setting of the service, and reads them in one place (its config.py says why).
    readers = {*(REPO / "convlog" / "settings").glob("*.py"), REPO / "convlog" / "client" / "config.py"}
    reads = [read for path in modules if path not in readers for read in _environment_reads(path)]
    assert reads == []
    assert _environment_reads(REPO / "convlog" / "client" / "config.py")
    assert _environment_reads(REPO / "convlog" / "settings" / "declared.py")  # the check sees a read where there is one


@pytest.mark.parametrize(
    ("raw", "entries"),
    [
        ("a:tok-x,b:tok-x", "entries 1 (tenant 'a') and 2 (tenant 'b')"),
        ("a:tok-x, a:tok-x", "entries 1 (tenant 'a') and 2 (tenant 'a')"),
        ("a:tok-x,c:tok-y, b:tok-x", "entries 1 (tenant 'a') and 3 (tenant 'b')"),
    ],
)
def test_a_token_listed_twice_is_refused_at_start_naming_the_entries_not_the_token(
    raw: str, entries: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Which tenant a doubled token authenticates would be the last one listed: refused, exit 2."""
    monkeypatch.setenv("CONVLOG_API_TOKENS", raw)
    assert main(["config"]) == 2  # as every command, serve included, before it does anything
    err = capsys.readouterr().err
    assert err.startswith(f"convlog: error: CONVLOG_API_TOKENS=****: {entries} have the same token")
    assert "tok-" not in err  # the token is not shown
