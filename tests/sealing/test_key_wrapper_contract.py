"""The KeyWrapper contract, run unchanged against every KEK: the local master key (its file,
and ``CONVLOG_MASTER_KEY``) and the fake Vault transit (the shape of a KMS adapter)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from events.errors import KeyStoreError
from events.sealing.envelope import key_associated_data
from events.sealing.keys import new_secret
from events.sealing.local_kek import LocalMasterKey
from events.sealing.ports import KeyWrapper
from tests.sealing.fake_transit import FakeTransit

AD = key_associated_data("uk_" + "0" * 32, "acme:alice")


@dataclass
class Kek:
    """A wrapper and what its operator does to rotate it: add a new current KEK, then retire
    the earlier ones once every user key is rewrapped. Each returns the wrapper to use next."""

    wrapper: KeyWrapper
    rotate: Callable[[], KeyWrapper]
    retire: Callable[[], KeyWrapper]


def _local_file(tmp_path: Path) -> Kek:
    master = LocalMasterKey.open(tmp_path / "master.key")

    def rotate() -> KeyWrapper:
        master.rotate()
        return master

    def retire() -> KeyWrapper:
        master.retire(in_use=())
        return master

    return Kek(master, rotate, retire)


def _local_setting() -> Kek:
    first, second = (base64.b64encode(new_secret()).decode() for _ in range(2))
    return Kek(
        LocalMasterKey.from_setting(first),
        lambda: LocalMasterKey.from_setting(f"{second},{first}"),
        lambda: LocalMasterKey.from_setting(second),
    )


def _transit() -> Kek:
    transit = FakeTransit()

    def rotate() -> KeyWrapper:
        transit.rotate()
        return transit

    def retire() -> KeyWrapper:
        transit.trim()
        return transit

    return Kek(transit, rotate, retire)


@pytest.fixture(params=["local-file", "local-setting", "vault-transit"])
def kek(request: pytest.FixtureRequest, tmp_path: Path) -> Kek:
    if request.param == "local-file":
        return _local_file(tmp_path)
    return _local_setting() if request.param == "local-setting" else _transit()


async def test_a_wrap_unwraps_to_the_secret_and_is_not_the_secret(kek: Kek) -> None:
    secret = new_secret()
    wrapped = await kek.wrapper.wrap(secret, associated_data=AD)
    assert secret not in wrapped
    assert wrapped != await kek.wrapper.wrap(secret, associated_data=AD)  # a fresh nonce each time
    assert await kek.wrapper.unwrap(wrapped, kek_id=kek.wrapper.kek_id, associated_data=AD) == secret


async def test_a_wrap_moved_to_another_key_or_subject_fails(kek: Kek) -> None:
    wrapped = await kek.wrapper.wrap(new_secret(), associated_data=AD)
    for other in (
        key_associated_data("uk_" + "1" * 32, "acme:alice"),
        key_associated_data("uk_" + "0" * 32, "acme:bob"),
    ):
        with pytest.raises(KeyStoreError):
            await kek.wrapper.unwrap(wrapped, kek_id=kek.wrapper.kek_id, associated_data=other)


async def test_an_altered_wrap_fails(kek: Kek) -> None:
    wrapped = bytearray(await kek.wrapper.wrap(new_secret(), associated_data=AD))
    wrapped[-3] ^= 0x04
    with pytest.raises(KeyStoreError):
        await kek.wrapper.unwrap(bytes(wrapped), kek_id=kek.wrapper.kek_id, associated_data=AD)


async def test_a_kek_it_does_not_hold_fails(kek: Kek) -> None:
    wrapped = await kek.wrapper.wrap(new_secret(), associated_data=AD)
    with pytest.raises(KeyStoreError):
        await kek.wrapper.unwrap(wrapped, kek_id="local:ffffffffffffffff", associated_data=AD)


async def test_rotation_wraps_under_a_new_kek_and_retiring_the_old_one_ends_its_wraps(kek: Kek) -> None:
    secret = new_secret()
    old_id = kek.wrapper.kek_id
    old_wrap = await kek.wrapper.wrap(secret, associated_data=AD)
    rotated = kek.rotate()
    assert rotated.kek_id != old_id
    assert await rotated.unwrap(old_wrap, kek_id=old_id, associated_data=AD) == secret  # until retired
    new_wrap = await rotated.wrap(secret, associated_data=AD)
    retired = kek.retire()
    assert await retired.unwrap(new_wrap, kek_id=retired.kek_id, associated_data=AD) == secret
    with pytest.raises(KeyStoreError):
        await retired.unwrap(old_wrap, kek_id=old_id, associated_data=AD)
