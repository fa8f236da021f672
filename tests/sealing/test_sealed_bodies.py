"""Sealed records (schema v5): content sealed before it enters the log, opened only with its
key, bound to its conversation and event, and an erased placeholder once the key is gone."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from events.codec import default_codec
from events.embedded_log import EmbeddedEventLog
from events.errors import MalformedSealError, UnauthenticSealError, UnknownKeyError
from events.event_types import ConversationStarted, Event, MessageAppended, SummaryRecorded
from events.keys import ConversationKey
from events.producer import ConversationProducer
from events.reading import conversation_events
from events.sealing import bodies as bodies_module
from events.sealing.bodies import SEALABLE, clear_copy, is_erased, open_event, seal_event
from events.sealing.envelope import AeadCache, open_with, seal_bytes
from events.sealing.keys import new_secret
from tests.fixtures.events import make_fixtures
from tests.fixtures.events.expected import FIXTURES_DIR, event_from_json
from tests.sealing.rings import DictKeys

CODEC = default_codec()
SEALABLE_SAMPLES = {name: e for name, e in make_fixtures.SAMPLES.items() if isinstance(e.body, SEALABLE)}
MARKER = "MARKER-7f3a9c"


def _sealed(event: Event, keys: DictKeys) -> Event:
    return seal_event(event, keys.current(event.key) or keys.add(event.key), CODEC)


@pytest.mark.parametrize("name", sorted(SEALABLE_SAMPLES))
def test_every_content_body_seals_and_opens_to_itself(name: str) -> None:
    keys = DictKeys()
    event = SEALABLE_SAMPLES[name]
    sealed = _sealed(event, keys)
    assert sealed.body.sealed is not None  # type: ignore[union-attr]
    assert sealed.body == dataclasses.replace(clear_copy(event.body), sealed=sealed.body.sealed)  # type: ignore[arg-type, union-attr]
    on_the_log = CODEC.decode_unopened(CODEC.encode(sealed))
    assert on_the_log == sealed
    assert CODEC.with_keys(keys).decode(CODEC.encode(sealed)) == event


def test_no_content_field_is_left_in_clear_on_the_log() -> None:
    keys = DictKeys()
    key = ConversationKey("t", "u", "c")
    at = make_fixtures.SAMPLES["message_user_text"].occurred_at
    bodies = [
        ConversationStarted(title=f"{MARKER} title", metadata={"k": f"{MARKER} meta"}),
        MessageAppended("m1", "user", f"{MARKER} content", name="alice", metadata={"m": MARKER}),
        SummaryRecorded("s1", f"{MARKER} summary", "m1", "gpt-4o-mini", "v1"),
    ]
    for i, body in enumerate(bodies):
        data = CODEC.encode(_sealed(Event(f"e{i}", key, at, "p", body), keys))
        assert MARKER.encode() not in data
        assert b"alice" not in data


def test_the_released_sealed_fixtures_open_with_the_test_key() -> None:
    keys = DictKeys()
    conversation = next(iter(make_fixtures.SAMPLES.values())).key
    keys.add(conversation, secret=make_fixtures.TEST_KEY, key_id=make_fixtures.TEST_KEY_ID)
    opening = CODEC.with_keys(keys)
    for name in make_fixtures.SEALED_SAMPLES:
        data = (FIXTURES_DIR / "v5" / f"sealed_{name}.bin").read_bytes()
        assert opening.decode(data) == make_fixtures.SAMPLES[name], name
        expected = (FIXTURES_DIR / "v5" / f"sealed_{name}.json").read_text(encoding="utf-8")
        assert CODEC.decode(data) == event_from_json(__import__("json").loads(expected)), name


def test_a_flipped_bit_fails_authentication() -> None:
    keys = DictKeys()
    sealed = _sealed(make_fixtures.SAMPLES["message_user_text"], keys)
    seal = sealed.body.sealed  # type: ignore[union-attr]
    assert seal is not None
    for i in (0, len(seal.ciphertext) // 2, len(seal.ciphertext) - 1):
        flipped = bytearray(seal.ciphertext)
        flipped[i] ^= 0x01
        tampered = dataclasses.replace(
            sealed, body=dataclasses.replace(sealed.body, sealed=dataclasses.replace(seal, ciphertext=bytes(flipped)))
        )
        with pytest.raises(UnauthenticSealError):
            open_event(tampered, keys, CODEC)


def test_a_record_moved_to_another_conversation_or_event_fails_authentication() -> None:
    keys = DictKeys()
    sealed = _sealed(make_fixtures.SAMPLES["message_user_text"], keys)
    other = ConversationKey("acme", "user-42", "another-conversation")
    with pytest.raises(UnauthenticSealError, match="another conversation"):
        open_event(dataclasses.replace(sealed, key=other), keys, CODEC)
    # Even a key store that would vouch for the key there: the associated data refuses it.
    keys.moved(keys.current(sealed.key), other)  # type: ignore[arg-type]
    with pytest.raises(UnauthenticSealError, match="fails authentication"):
        open_event(dataclasses.replace(sealed, key=other), keys, CODEC)
    keys = DictKeys()
    sealed = _sealed(make_fixtures.SAMPLES["message_user_text"], keys)
    with pytest.raises(UnauthenticSealError, match="fails authentication"):
        open_event(dataclasses.replace(sealed, event_id="another-event"), keys, CODEC)


def test_an_unknown_key_is_refused_never_served_clear() -> None:
    sealed = _sealed(make_fixtures.SAMPLES["message_user_text"], DictKeys())
    with pytest.raises(UnknownKeyError):
        open_event(sealed, DictKeys(), CODEC)


def test_a_destroyed_key_opens_as_an_erased_placeholder() -> None:
    keys = DictKeys()
    event = make_fixtures.SAMPLES["message_assistant_tool_calls"]
    sealed = _sealed(event, keys)
    keys.destroy(event.key)
    opened = open_event(sealed, keys, CODEC)
    assert is_erased(opened.body)
    assert opened.body == sealed.body
    assert isinstance(opened.body, MessageAppended)
    assert (opened.body.content, opened.body.tool_calls, opened.body.metadata) == (None, (), {})
    assert (opened.body.role, opened.body.model, opened.body.usage) == (
        "assistant",
        "gpt-4o-2024-08-06",
        event.body.usage,
    )  # type: ignore[union-attr]


def test_a_key_opened_before_is_erased_the_moment_it_is_destroyed() -> None:
    # Opening keeps one AES-GCM per key (events/sealing/envelope.py, AeadCache): a key that
    # opened records a moment ago must not open the next one once it is destroyed.
    keys = DictKeys()
    event = make_fixtures.SAMPLES["message_user_text"]
    sealed = _sealed(event, keys)
    assert open_event(sealed, keys, CODEC) == event
    key_id = sealed.body.sealed.key_id  # type: ignore[union-attr]
    assert key_id in bodies_module._AEADS
    keys.destroy(event.key)
    opened = open_event(sealed, keys, CODEC)
    assert is_erased(opened.body)
    assert opened.body == sealed.body
    assert key_id not in bodies_module._AEADS  # nothing of the destroyed key is kept


def test_the_aead_cache_serves_only_the_secret_it_was_made_with_and_stays_bounded() -> None:
    cache = AeadCache(size=2)
    first, second = new_secret(), new_secret()
    ad = b"ad"
    nonce, ciphertext = seal_bytes(second, b"plain", ad)
    cache.get("k1", first)
    # the same id with another secret (a key id reused by a buggy store): never the old schedule
    assert open_with(cache.get("k1", second), nonce, ciphertext, ad) == b"plain"
    with pytest.raises(UnauthenticSealError):
        open_with(cache.get("k1", first), nonce, ciphertext, ad)
    cache.get("k2", first)
    cache.get("k1", first)  # k1 used last: k2 is the least recently used
    cache.get("k3", first)
    assert ("k1" in cache, "k2" in cache, "k3" in cache, len(cache)) == (True, False, True, 2)
    cache.forget("k1")
    assert "k1" not in cache


def test_content_beside_a_seal_or_clear_fields_that_disagree_are_malformed() -> None:
    keys = DictKeys()
    sealed = _sealed(make_fixtures.SAMPLES["message_user_text"], keys)
    beside = dataclasses.replace(sealed, body=dataclasses.replace(sealed.body, content="clear text too"))
    with pytest.raises(MalformedSealError, match="beside"):
        open_event(beside, keys, CODEC)
    disagree = dataclasses.replace(sealed, body=dataclasses.replace(sealed.body, role="assistant"))
    with pytest.raises(MalformedSealError, match="disagree"):
        open_event(disagree, keys, CODEC)


async def test_the_producer_seals_first_events_and_later_ones(tmp_path: Path) -> None:
    keys = DictKeys()
    log = EmbeddedEventLog.open(tmp_path / "events.log", partitions=2)
    try:
        producer = ConversationProducer(log, producer="test", keys=keys)
        key = ConversationKey("t", "u", "c")
        await producer.start_conversation(key, title=f"{MARKER} title")  # no key yet: sealed on append
        await producer.append_user(key, f"{MARKER} hello")  # the key is known: sealed when built
        await producer.append_native(key, "anthropic", {"role": "assistant", "content": f"{MARKER} hi"})
        raw = [e async for _, e in conversation_events(log, key)]
        assert all(e.body.sealed is not None for e in raw)  # type: ignore[union-attr]
        assert MARKER.encode() not in (tmp_path / "events.log").read_bytes()
        opened = [e async for _, e in conversation_events(log, key, codec=CODEC.with_keys(keys))]
        assert [getattr(e.body, "title", None) or e.body.content for e in opened] == [  # type: ignore[union-attr]
            f"{MARKER} title",
            f"{MARKER} hello",
            f"{MARKER} hi",
        ]
    finally:
        await log.close()
