"""``convlog stop``: stops the embedded Postgres that ``serve`` / ``make demo`` leave running."""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path

import pytest

from convlog.cli.main import build_parser
from convlog.demo.run import print_stop_hint, print_try_it
from convlog.embedded.postgres import ensure_embedded_postgres
from convlog.embedded.postgres_server import PostgresHandle
from convlog.settings import Settings
from events.keys import ConversationKey
from tests.support import convlog_cli
from tests.test_pg import require_pg_binaries


def cli_main(argv: list[str]) -> int:
    """``convlog ARGV``'s exit code, in-process but without ``cli.main``'s logging setup (it binds
    structlog to this test's captured stderr, for every later test)."""
    args = build_parser().parse_args(argv)
    code: int = args.handler(Settings.from_env(), args)
    return code


@pytest.mark.slow
def test_convlog_stop_stops_the_embedded_postgres(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    require_pg_binaries()
    monkeypatch.setenv("CONVLOG_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("CONVLOG_DATABASE_URL", raising=False)
    monkeypatch.delenv("CONVLOG_KAFKA_BOOTSTRAP", raising=False)
    ensure_embedded_postgres(tmp_path)
    handle = PostgresHandle(tmp_path / "postgres")
    try:
        assert handle.running
        log_file = Settings.from_env().embedded_log_path
        log_file.parent.mkdir(parents=True)
        with log_file.open("wb") as held:  # `convlog serve` holds the log: stop refuses
            fcntl.flock(held, fcntl.LOCK_EX)
            assert cli_main(["stop"]) == 2
            assert "stop it first" in capsys.readouterr().out
            assert handle.running
        assert cli_main(["stop"]) == 0
        assert "stopped the embedded Postgres" in capsys.readouterr().out
        assert not handle.running
        assert cli_main(["stop"]) == 0
        assert "is not running" in capsys.readouterr().out
        assert (handle.pgdata / "PG_VERSION").is_file()  # the data is kept for the next start
    finally:
        handle.stop()


def test_the_demo_names_convlog_stop_only_when_it_started_postgres(capsys: pytest.CaptureFixture[str]) -> None:
    print_stop_hint(Settings(data_dir=Path(".convlog")))
    assert "\n  .venv/bin/convlog stop" in capsys.readouterr().out
    print_stop_hint(Settings(data_dir=Path("/srv/my demo")))
    assert "CONVLOG_DATA_DIR='/srv/my demo' .venv/bin/convlog stop" in capsys.readouterr().out, "the data dir in effect"
    print_stop_hint(Settings(database_url=os.environ.get("CONVLOG_DATABASE_URL") or "postgresql://x/y"))
    assert capsys.readouterr().out == ""


def test_the_demos_hints_use_the_port_and_data_dir_in_effect(capsys: pytest.CaptureFixture[str]) -> None:
    print_try_it(ConversationKey("acme", "u1", "c1"), Settings(http_port=9191, data_dir=Path("/srv/demo")))
    out = capsys.readouterr().out
    assert "CONVLOG_DATA_DIR=/srv/demo CONVLOG_API_TOKENS=" in out
    assert "http://127.0.0.1:9191/v1/users/u1/conversations/c1/context" in out
    assert ":8080" not in out


def test_serve_on_a_port_in_use_exits_2_naming_it_before_starting_anything(tmp_path: Path) -> None:
    """The port is bound first: taken, serve exits 2 (bad configuration) naming the address and
    its settings, and has started nothing — before, it started the embedded Postgres (left
    running) and the log, then uvicorn exited 3."""
    require_pg_binaries()
    env = {k: v for k, v in os.environ.items() if k not in ("CONVLOG_DATABASE_URL", "CONVLOG_KAFKA_BOOTSTRAP")}
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        env |= {"CONVLOG_DATA_DIR": str(tmp_path), "CONVLOG_HTTP_PORT": str(port), "CONVLOG_SUMMARIZER": "off"}
        try:
            served = convlog_cli(env, "serve")
        finally:
            PostgresHandle(tmp_path / "postgres").stop()  # what a failing serve would have left running
    assert served.returncode == 2, served.stderr
    assert f"cannot listen on 127.0.0.1:{port} (CONVLOG_HTTP_HOST, CONVLOG_HTTP_PORT)" in served.stderr
    assert not (tmp_path / "postgres").exists()  # no embedded Postgres was started
    assert not Settings(data_dir=tmp_path).embedded_log_path.exists()
