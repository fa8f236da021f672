"""``convlog keys list|show|rotate`` and the wiring behind them (``open_key_store``): what an
operator sees of the keys, never their bytes, and a rotation that leaves every key readable."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from convlog.cli.main import main
from convlog.settings import Settings
from convlog.wiring import open_key_store, open_key_wrapper
from events.errors import ConfigurationError
from events.keys import ConversationKey
from events.sealing.kafka_keys import KafkaKeyRecordLog
from events.sealing.keys import DataKey, DestroyedKey
from tests.sealing.fake_transit import FakeTransit
from tests.support import unique_topic

C1 = ConversationKey("acme", "alice", "c1")
C2 = ConversationKey("acme", "bob", "c2")


@pytest.fixture(autouse=True)
def _logging_restored(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI, run in process, binds structlog to this test's captured stderr, which is closed
    after it: with loggers cached on first use, every later test's log line would fail
    (test_embedded_log's did). So nothing is cached meanwhile, and the configuration is restored."""
    import convlog.cli.main as cli  # noqa: PLC0415

    before, configure = structlog.get_config(), cli.configure_logging

    def uncached(*args: Any, **kwargs: Any) -> None:
        configure(*args, **kwargs)
        structlog.configure(cache_logger_on_first_use=False)

    monkeypatch.setattr(cli, "configure_logging", uncached)
    yield
    structlog.configure(**before)


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The embedded configuration in the test's directory, as the CLI reads it from the environment."""
    for var in ("CONVLOG_KAFKA_BOOTSTRAP", "CONVLOG_MASTER_KEY", "CONVLOG_KEK_FACTORY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CONVLOG_DATA_DIR", str(tmp_path))
    return Settings.from_env()


async def _two_keys_one_destroyed(settings: Settings) -> tuple[DataKey, DataKey]:
    store = await open_key_store(settings)
    try:
        kept, erased = await store.ensure(C1), await store.ensure(C2)
        await store.destroy_conversation(C2, requested_by="dpo@acme", reason="art. 17")
    finally:
        await store.close()
    return kept, erased


def test_list_shows_every_key_and_who_destroyed_which_without_bytes(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    kept, erased = asyncio.run(_two_keys_one_destroyed(settings))
    capsys.readouterr()  # what the setup logged
    assert main(["keys", "list"]) == 0
    out = capsys.readouterr().out
    header, *rows = out.splitlines()
    assert header.split()[:3] == ["key", "id", "kind"]
    assert len(rows) == 4  # two user keys, two conversation keys
    [erased_row] = [r for r in rows if r.startswith(erased.key_id)]
    assert "dpo@acme" in erased_row
    assert "art. 17" in erased_row
    assert main(["keys", "list", "--json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {k["key_id"] for k in listed} >= {kept.key_id, erased.key_id}
    for key in (kept, erased):
        assert key.secret.hex() not in out
    assert "wrapped" not in {name for k in listed for name in k if name != "wrapped_by"}


def test_show_one_key_and_an_unknown_one(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    _, erased = asyncio.run(_two_keys_one_destroyed(settings))
    capsys.readouterr()  # what the setup logged
    assert main(["keys", "show", erased.key_id]) == 0
    shown = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines() if len(line.split(None, 1)) == 2)
    assert (shown["kind"], shown["conversation_id"], shown["requested_by"]) == ("conversation", "c2", "dpo@acme")
    assert main(["keys", "show", "ck_nothere"]) == 2


def test_list_on_a_fresh_data_dir_creates_nothing(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "list"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert list(settings.data_dir.iterdir()) == []


def test_rotate_rewraps_and_retire_drops_the_old_kek_with_every_key_still_open(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    kept, _ = asyncio.run(_two_keys_one_destroyed(settings))
    capsys.readouterr()  # what the setup logged
    assert main(["keys", "rotate", "--retire"]) == 0
    out = capsys.readouterr().out
    assert "rewrapped 2 user key(s)" in out  # alice's and bob's: erasing bob's conversation left his user key
    assert "retired 1 earlier KEK(s)" in out
    found = asyncio.run(_lookup(settings, kept.key_id))
    assert isinstance(found, DataKey)
    assert found.secret == kept.secret


async def _lookup(settings: Settings, key_id: str) -> DataKey | DestroyedKey | None:
    store = await open_key_store(settings)
    try:
        return store.lookup(key_id)
    finally:
        await store.close()


@pytest.mark.kafka
async def test_with_kafka_the_keys_live_in_the_keys_topic(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = Settings(kafka_bootstrap=kafka_bootstrap, topic=unique_topic(), data_dir=tmp_path, partitions=1)
    first = await open_key_store(settings)
    try:
        key = await first.ensure(C1)
        assert isinstance(first._records, KafkaKeyRecordLog)
        assert first._records.topic == f"{settings.topic}.keys"
    finally:
        await first.close()
    assert not settings.keys_file_path.exists()
    second = await open_key_store(settings)
    try:
        assert second.lookup(key.key_id) == key
    finally:
        await second.close()


def test_a_lost_master_key_is_named_as_the_disaster_it_is(
    settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_two_keys_one_destroyed(settings))
    settings.master_key_path.unlink()
    capsys.readouterr()
    assert main(["keys", "list"]) == 2
    err = capsys.readouterr().err
    assert "no master key at" in err
    assert "restore it from its backup" in err
    assert not settings.master_key_path.exists()  # a read-only command creates no new, useless one


def test_a_bad_master_key_setting_stops_every_command_without_showing_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONVLOG_MASTER_KEY", "c2hvcnQ=")  # base64 of "short"
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("convlog: error: CONVLOG_MASTER_KEY=****: a key is 32 bytes, got 5")
    assert "c2hvcnQ" not in err


def test_a_kek_factory_setting_puts_a_kms_in_place_of_the_master_key(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, kek_factory="tests.sealing.fake_transit:transit_factory")
    wrapper = open_key_wrapper(settings)
    assert isinstance(wrapper, FakeTransit)
    assert wrapper.kek_id == "vault-transit:convlog:v1"
    assert not settings.master_key_path.exists()  # no local master key is made
    with pytest.raises(ConfigurationError, match="CONVLOG_KEK_FACTORY"):
        open_key_wrapper(Settings(data_dir=tmp_path, kek_factory="tests.sealing.fake_transit:nothing_here"))
