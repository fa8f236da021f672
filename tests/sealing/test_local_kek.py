"""The local master key's own promises: a file only its owner can read, created once, seen
rotated by every process that uses it; a setting that is 32 bytes of base64 or refused."""

from __future__ import annotations

import base64
import stat
from pathlib import Path

import pytest

from events.errors import ConfigurationError
from events.sealing.envelope import key_associated_data
from events.sealing.keys import new_secret
from events.sealing.local_kek import LocalMasterKey, kek_id_of

AD = key_associated_data("uk_" + "0" * 32, "acme:alice")


def test_the_file_is_created_on_first_use_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "data" / "master.key"
    first = LocalMasterKey.open(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert LocalMasterKey.open(path).kek_id == first.kek_id  # created once, then reused
    assert first.kek_id.startswith("local:")


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_file_others_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "master.key"
    LocalMasterKey.open(path)
    path.chmod(mode)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        LocalMasterKey.open(path)


def test_without_create_a_missing_file_is_an_error_that_names_the_disaster(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no sealed content can be opened"):
        LocalMasterKey.open(tmp_path / "master.key", create=False)
    assert not (tmp_path / "master.key").exists()


async def test_a_rotation_by_another_process_is_seen_by_this_one(tmp_path: Path) -> None:
    serving = LocalMasterKey.open(tmp_path / "master.key")
    rotating = LocalMasterKey.open(tmp_path / "master.key")
    new_id = rotating.rotate()
    assert serving.kek_id == new_id  # new user keys are wrapped under the new KEK at once
    secret = new_secret()
    wrapped = await rotating.wrap(secret, associated_data=AD)
    assert await serving.unwrap(wrapped, kek_id=new_id, associated_data=AD) == secret


def test_retire_keeps_the_keks_still_in_use(tmp_path: Path) -> None:
    master = LocalMasterKey.open(tmp_path / "master.key")
    old = master.kek_id
    master.rotate()
    assert master.retire(in_use={old}) == ()
    assert master.retire(in_use=()) == (old,)
    assert master.kek_ids == (master.kek_id,)


def test_the_setting_is_base64_of_32_bytes() -> None:
    kek = new_secret()
    assert LocalMasterKey.from_setting(base64.b64encode(kek).decode()).kek_id == kek_id_of(kek)
    for bad in ("not base64!", base64.b64encode(b"short").decode(), " , "):
        with pytest.raises(ConfigurationError, match="CONVLOG_MASTER_KEY"):
            LocalMasterKey.from_setting(bad)
    with pytest.raises(ConfigurationError, match="CONVLOG_MASTER_KEY"):
        LocalMasterKey.from_setting(base64.b64encode(kek).decode()).rotate()
