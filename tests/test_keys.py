"""Conversation keys: unambiguous encoding, clear refusals, Java-identical partitioning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.errors import InvalidKeyError
from events.keys import ConversationKey, murmur2, partition_for_key

VECTORS = Path(__file__).parent / "fixtures" / "murmur2_java_vectors.jsonl"

# Utils.murmur2 values asserted by Kafka's own UtilsTest.
KAFKA_UTILS_TEST = {
    "21": -973932308,
    "foobar": -790332482,
    "a-little-bit-long-string": -985981536,
    "a-little-bit-longer-string": -1486304829,
    "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    "abc": 479470107,
}

part = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=40).filter(
    lambda s: s.strip() != ""
)


@pytest.mark.parametrize(("text", "expected"), KAFKA_UTILS_TEST.items())
def test_murmur2_matches_kafkas_utils_test(text: str, expected: int) -> None:
    assert murmur2(text.encode()) == expected


def test_partitions_match_the_java_client_vectors() -> None:
    """Vectors printed by the Java client (services/kafka/Murmur2Vectors.java)."""
    lines = VECTORS.read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 10
    for line in lines:
        vector = json.loads(line)
        raw = vector["key"].encode("utf-8")
        assert murmur2(raw) == vector["murmur2"], vector["key"]
        for count, expected in vector["partitions"].items():
            assert partition_for_key(raw, int(count)) == expected, (vector["key"], count)


def test_plain_ids_encode_as_the_naive_join() -> None:
    key = ConversationKey("acme", "employee-42", "c1")
    assert key.encode() == b"acme:employee-42:c1"


def test_separator_inside_an_id_is_escaped_not_ambiguous() -> None:
    a = ConversationKey("t", "a:b", "c")
    b = ConversationKey("t", "a", "b:c")
    assert a.encode() == b"t:a\\:b:c"
    assert a.encode() != b.encode()
    assert ConversationKey.parse(a.encode()) == a
    assert ConversationKey.parse(str(b)) == b


@given(part, part, part)
def test_encoding_round_trips(tenant: str, user: str, conversation: str) -> None:
    key = ConversationKey(tenant, user, conversation)
    assert ConversationKey.parse(key.encode()) == key


@given(st.tuples(part, part, part), st.tuples(part, part, part))
def test_encoding_is_injective(a: tuple[str, str, str], b: tuple[str, str, str]) -> None:
    assert (ConversationKey(*a).encode() == ConversationKey(*b).encode()) == (a == b)


@pytest.mark.parametrize(
    ("parts", "field"),
    [
        (("", "u", "c"), "tenant_id"),
        (("t", " ", "c"), "user_id"),
        (("t", "u", ""), "conversation_id"),
        (("t", "u", "x" * 257), "conversation_id"),
        (("t", "u\n", "c"), "user_id"),
    ],
)
def test_bad_parts_are_refused_with_the_field(parts: tuple[str, str, str], field: str) -> None:
    with pytest.raises(InvalidKeyError) as info:
        ConversationKey(*parts)
    assert info.value.field == field


@pytest.mark.parametrize("raw", [b"a:b", b"a:b:c:d", b"a:b:c\\", b"a:b\\x:c", b"\xff:u:c"])
def test_malformed_keys_do_not_parse(raw: bytes) -> None:
    with pytest.raises(InvalidKeyError):
        ConversationKey.parse(raw)
