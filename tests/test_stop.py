"""``convlog stop``: stops the embedded Postgres that ``serve`` / ``make demo`` leave running."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from convlog.cli.main import build_parser
from convlog.demo.run import print_stop_hint, print_try_it
from convlog.local.embedded_pg import ensure_embedded_postgres
from convlog.local.postgres_service import PostgresHandle
from convlog.settings import Settings
from events.keys import ConversationKey
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
