"""The key store's behaviour, over every backend (memory, the file, Kafka): what erasure,
the producers and the projector rely on. Several stores on one backend stand for several
processes (``convlog serve`` instances, ``convlog erase``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import fields
from pathlib import Path

import pytest

from events.errors import KeyStoreError, SubjectNotFoundError
from events.keys import ConversationKey
from events.sealing.key_store import SubjectKeyStore
from events.sealing.keys import DataKey, DestroyedKey, UserSubject
from events.sealing.local_kek import LocalMasterKey
from events.sealing.ports import KeyRecord, KeyRecordLog, KeyWrapper
from tests.sealing.conftest import OpenRecords
from tests.sealing.fake_transit import FakeTransit

ALICE = UserSubject("acme", "alice")
C1, C2, C3 = (ConversationKey("acme", "alice", f"c{i}") for i in (1, 2, 3))
BOB_C = ConversationKey("acme", "bob", "c1")

OpenStore = Callable[..., Awaitable[SubjectKeyStore]]


@pytest.fixture
def master(tmp_path: Path) -> LocalMasterKey:
    return LocalMasterKey.open(tmp_path / "master.key")


@pytest.fixture
def open_store(open_records: OpenRecords, master: LocalMasterKey) -> OpenStore:
    """Opens another store (another process) on the test's backend, under ``master`` unless told."""

    async def open_one(wrapper: KeyWrapper | None = None) -> SubjectKeyStore:
        return await SubjectKeyStore.open(await open_records(), wrapper or master)

    return open_one  # the records' fixture closes every backend handle


def _live(found: DataKey | DestroyedKey | None) -> DataKey:
    assert isinstance(found, DataKey), found
    return found


async def test_ensure_creates_once_and_lookup_answers_from_memory(open_store: OpenStore) -> None:
    store = await open_store()
    assert store.current(C1) is None
    key = await store.ensure(C1)
    assert (key.kind, key.conversation, key.user) == ("conversation", C1, ALICE)
    assert await store.ensure(C1) == key
    assert store.current(C1) == key
    assert store.lookup(key.key_id) == key
    assert store.lookup("ck_" + "0" * 32) is None
    assert (await store.ensure(C2)).secret != key.secret


async def test_a_second_store_sees_creates_and_destroys_after_refresh(open_store: OpenStore) -> None:
    first, second = await open_store(), await open_store()
    key = await first.ensure(C1)
    assert second.lookup(key.key_id) is None  # not yet: records are new to it
    await second.refresh()
    assert _live(second.lookup(key.key_id)).secret == key.secret
    assert await second.ensure(C1) == key  # it uses the same key, creates none
    await first.destroy_conversation(C1, requested_by="dpo@acme", reason="art. 17")
    await second.refresh()
    gone = second.lookup(key.key_id)
    assert isinstance(gone, DestroyedKey)
    assert (gone.requested_by, gone.reason, gone.conversation) == ("dpo@acme", "art. 17", C1)
    assert second.current(C1) is None


class _LoadsBefore:
    """A backend handle whose loads, while ``frozen``, answer what its last load did: a
    process whose load ran just before another's write landed."""

    def __init__(self, records: KeyRecordLog) -> None:
        self.records = records
        self.frozen = False
        self._last: list[KeyRecord] = []

    async def load(self) -> Iterable[KeyRecord]:
        if not self.frozen:
            self._last = list(await self.records.load())
        return self._last

    async def put(self, records: Sequence[KeyRecord]) -> None:
        await self.records.put(records)

    async def close(self) -> None:
        await self.records.close()


async def test_erasing_a_user_makes_every_key_unreadable_one_a_concurrent_store_created_included(
    open_store: OpenStore, open_records: OpenRecords, master: LocalMasterKey
) -> None:
    eraser = await open_store()
    k1, k2 = await eraser.ensure(C1), await eraser.ensure(C2)
    racing = _LoadsBefore(await open_records())
    writer = await SubjectKeyStore.open(racing, master)
    racing.frozen = True
    destruction = await eraser.destroy_user(ALICE, requested_by="dpo@acme")
    assert not destruction.already
    assert set(destruction.conversations) == {C1, C2}
    assert {k1.key_id, k2.key_id} <= set(destruction.key_ids)
    # The writer has not seen the erasure: it creates C3's key under the user key just destroyed.
    late = await writer.ensure(C3)
    assert _live(writer.lookup(late.key_id)).conversation == C3
    racing.frozen = False
    for store in (eraser, await open_store(), writer):
        await store.refresh()
        for key in (k1, k2, late):
            assert isinstance(store.lookup(key.key_id), DestroyedKey), (store, key)
        assert store.current(C3) is None
    fresh = await writer.ensure(C3)  # a user who comes back starts over
    assert fresh.key_id != late.key_id
    assert _live((await open_store()).lookup(fresh.key_id)).secret == fresh.secret


async def test_erasing_a_conversation_leaves_the_users_others_and_twice_is_already(open_store: OpenStore) -> None:
    store = await open_store()
    k1, k2, bob = await store.ensure(C1), await store.ensure(C2), await store.ensure(BOB_C)
    first = await store.destroy_conversation(C1)
    assert (first.key_ids, first.conversations, first.already) == ((k1.key_id,), (C1,), False)
    again = await store.destroy_conversation(C1)
    assert (again.key_ids, again.already) == ((), True)
    other = await open_store()
    assert isinstance(other.lookup(k1.key_id), DestroyedKey)
    assert _live(other.lookup(k2.key_id)).secret == k2.secret
    assert _live(other.lookup(bob.key_id)).secret == bob.secret
    assert (await store.destroy_user(ALICE)).already is False
    assert (await store.destroy_user(ALICE)).already is True
    assert list(store.conversations_of(ALICE)) == [C1, C2]


async def test_erasing_what_never_had_a_key_is_subject_not_found(open_store: OpenStore) -> None:
    store = await open_store()
    await store.ensure(C1)
    with pytest.raises(SubjectNotFoundError):
        await store.destroy_conversation(C2)
    with pytest.raises(SubjectNotFoundError):
        await store.destroy_user(UserSubject("acme", "nobody"))


async def test_two_stores_creating_one_conversations_key_at_once_both_stay_valid(open_store: OpenStore) -> None:
    first, second = await open_store(), await open_store()
    a, b = await asyncio.gather(first.ensure(C1), second.ensure(C1))
    reader = await open_store()
    for key in (a, b):
        assert _live(reader.lookup(key.key_id)).secret == key.secret
    assert reader.current(C1) in (a, b)
    destruction = await reader.destroy_conversation(C1)
    assert {a.key_id, b.key_id} <= set(destruction.key_ids)


async def test_rotation_rewraps_user_keys_and_they_open_once_the_old_kek_is_gone(
    open_store: OpenStore, master: LocalMasterKey
) -> None:
    store = await open_store()
    k1, bob = await store.ensure(C1), await store.ensure(BOB_C)
    old = master.kek_id
    master.rotate()
    assert await store.rotate(master) == 2
    assert {i.wrapped_by for i in store.infos() if i.kind == "user"} == {master.kek_id}
    assert master.retire(in_use={i.wrapped_by for i in store.infos() if i.kind == "user"}) == (old,)
    reader = await open_store()
    assert _live(reader.lookup(k1.key_id)).secret == k1.secret
    assert _live(reader.lookup(bob.key_id)).secret == bob.secret


async def test_rotation_to_a_kms_moves_every_user_key_off_the_local_master_key(open_store: OpenStore) -> None:
    store = await open_store()
    key = await store.ensure(C1)
    transit = FakeTransit()
    assert await store.rotate(transit) == 1
    assert _live((await open_store(transit)).lookup(key.key_id)).secret == key.secret
    transit.rotate()
    transit.trim()  # the version that wrapped it is retired: a store can no longer load the user key
    with pytest.raises(KeyStoreError):
        await open_store(transit)


async def test_infos_never_carry_bytes(open_store: OpenStore) -> None:
    store = await open_store()
    keys = [await store.ensure(C1), await store.ensure(BOB_C)]
    await store.destroy_conversation(BOB_C, reason="asked")
    infos = store.infos()
    assert {i.kind for i in infos} == {"user", "conversation"}
    assert len(infos) == 4
    for info in infos:
        assert not any(isinstance(getattr(info, f.name), bytes) for f in fields(info))
    for key in keys:
        assert key.secret.hex() not in repr(infos)
        assert key.secret.hex() not in repr(key)  # a DataKey's repr leaves its secret out


async def test_a_destroyed_keys_record_holds_no_wrapped_bytes(
    open_records: OpenRecords, master: LocalMasterKey
) -> None:
    records = await open_records()
    store = await SubjectKeyStore.open(records, master)
    await store.ensure(C1)
    await store.destroy_user(ALICE, requested_by="dpo", reason="art. 17")
    latest = [json.loads(r.value) for r in await records.load()]
    assert len(latest) == 2
    for value in latest:
        assert "wrapped" not in value
        assert (value["requested_by"], value["reason"], value["tenant_id"], value["user_id"]) == (
            "dpo",
            "art. 17",
            "acme",
            "alice",
        )


async def test_a_wrapped_key_moved_to_another_key_id_fails(open_records: OpenRecords, master: LocalMasterKey) -> None:
    records = await open_records()
    store = await SubjectKeyStore.open(records, master)
    k1, k2 = await store.ensure(C1), await store.ensure(C2)
    latest = {r.key_id: json.loads(r.value) for r in await records.load()}
    moved = latest[k2.key_id] | {"wrapped": latest[k1.key_id]["wrapped"]}  # k1's bytes under k2's id
    await records.put([KeyRecord(k2.key_id, json.dumps(moved).encode())])
    reader = await SubjectKeyStore.open(await open_records(), master)
    assert _live(reader.lookup(k1.key_id)).secret == k1.secret
    with pytest.raises(KeyStoreError, match="altered or moved"):
        reader.lookup(k2.key_id)


async def test_a_user_key_moved_to_another_user_fails_to_load(
    open_records: OpenRecords, master: LocalMasterKey
) -> None:
    records = await open_records()
    store = await SubjectKeyStore.open(records, master)
    await store.ensure(C1)
    [user_key] = [i for i in store.infos() if i.kind == "user"]
    latest = {r.key_id: json.loads(r.value) for r in await records.load()}
    moved = latest[user_key.key_id] | {"user_id": "mallory"}
    await records.put([KeyRecord(user_key.key_id, json.dumps(moved).encode())])
    with pytest.raises(KeyStoreError):
        await SubjectKeyStore.open(await open_records(), master)
