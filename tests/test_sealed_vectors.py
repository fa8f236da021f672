"""The sealed-record golden vector (schemas/vectors/sealed.json, written by tests/sealed_vectors.py)
is docs/producers.md's envelope, and what a reader of it refuses: each record opens, under the
test-only key, to the plain record convlog's codec writes for the same event; a flipped bit, a
record moved to another conversation or event, a clear field that disagrees with the sealed body
and content beside the seal are refused with the documented error."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from events.codec import default_codec
from events.errors import MalformedSealError, SealedRecordError, UnauthenticSealError
from events.sealing.envelope import record_associated_data
from tests import sealed_spec, sealed_vectors

CODEC = default_codec()
KEY = sealed_vectors.TEST_KEY


def document() -> dict[str, Any]:
    return json.loads(sealed_vectors.SEALED_FILE.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


RECORDS = document()["records"]


def test_the_committed_vector_is_what_the_generator_writes_now() -> None:
    assert sealed_vectors.SEALED_FILE.read_text(encoding="utf-8") == sealed_vectors.render(), (
        "sealed.json is stale: run `python -m tests.sealed_vectors` and commit it"
    )


def test_the_vector_covers_every_sealed_body_type_with_its_test_only_key() -> None:
    doc = document()
    assert {r["body_type"] for r in RECORDS} == set(sealed_spec.SEALED_TYPES)
    assert (doc["schema_version"], doc["fingerprint"]) == (CODEC.version, CODEC.fingerprint.hex())
    assert base64.b64decode(doc["test_only_key"]["key_base64"]) == KEY
    assert len({r["nonce_hex"] for r in RECORDS}) == len(RECORDS)  # never one nonce twice under a key


@pytest.mark.parametrize("vector", RECORDS, ids=lambda v: v["name"])
def test_each_sealed_record_opens_to_the_plain_record_of_its_event(vector: dict[str, Any]) -> None:
    value, plain = bytes.fromhex(vector["value_hex"]), bytes.fromhex(vector["plain_value_hex"])
    assert sealed_spec.open_value(value, KEY) == plain
    # The page's associated data is the envelope's, and the ciphertext is the plaintext's.
    ad = record_associated_data(vector["key"], vector["event_id"], vector["body_type"], sealed_vectors.TEST_KEY_ID)
    assert ad.hex() == vector["associated_data_hex"]
    nonce, ciphertext = bytes.fromhex(vector["nonce_hex"]), bytes.fromhex(vector["ciphertext_hex"])
    assert AESGCM(KEY).decrypt(nonce, ciphertext, ad).hex() == vector["plaintext_hex"]
    # Decoded without the key, a sealed record is its clear fields: its ids and its type.
    clear = CODEC.decode(value)
    event = CODEC.decode(plain)
    assert (clear.event_id, clear.key, clear.occurred_at, clear.event_type) == (
        event.event_id,
        event.key,
        event.occurred_at,
        event.event_type,
    )


def _changed(vector: dict[str, Any], **envelope: Any) -> bytes:
    record = sealed_spec.read_value(bytes.fromhex(vector["value_hex"]))
    return sealed_spec.write_value({**record, **envelope})


def _changed_body(vector: dict[str, Any], **fields: Any) -> bytes:
    record = sealed_spec.read_value(bytes.fromhex(vector["value_hex"]))
    name, body = record["body"]
    return sealed_spec.write_value({**record, "body": (name, {**body, **fields})})


@pytest.mark.parametrize("vector", RECORDS, ids=lambda v: v["name"])
def test_a_flipped_bit_or_a_record_moved_elsewhere_fails_authentication(vector: dict[str, Any]) -> None:
    _, body = sealed_spec.read_value(bytes.fromhex(vector["value_hex"]))["body"]
    sealed = body["sealed"]
    for bit in (0, len(sealed["ciphertext"]) * 8 - 1):  # the first byte of the ciphertext, the last of the tag
        flipped = bytearray(sealed["ciphertext"])
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(UnauthenticSealError):
            sealed_spec.open_value(_changed_body(vector, sealed={**sealed, "ciphertext": bytes(flipped)}), KEY)
    moved = [
        _changed(vector, conversation_id="another-conversation"),  # another conversation of the user
        _changed(vector, user_id="another-user"),
        _changed(vector, tenant_id="another-tenant"),
        _changed(vector, event_id="vec-999"),  # the same conversation, another event
        _changed_body(vector, sealed={**sealed, "key_id": "ck_" + "0" * 32}),
    ]
    for value in moved:
        with pytest.raises(UnauthenticSealError):
            sealed_spec.open_value(value, KEY)
    with pytest.raises(UnauthenticSealError):
        sealed_spec.open_value(bytes.fromhex(vector["value_hex"]), bytes(32))  # another key


def test_clear_fields_that_disagree_or_content_beside_the_seal_are_a_malformed_seal() -> None:
    by_name = {v["name"]: v for v in RECORDS}
    answer = by_name["assistant_answer"]
    disagreeing = [
        _changed_body(answer, model="gpt-5"),
        _changed_body(answer, finish_reason="length"),
        _changed_body(by_name["tool_result"], tool_call_id="call_9"),
        _changed_body(by_name["summary_recorded"], covers_through_message_id="vec-1"),
    ]
    beside = [
        _changed_body(answer, content="in clear beside the seal"),
        _changed_body(answer, metadata={"app": "oa-assistant"}),
        _changed_body(by_name["conversation_started"], title="Overtime request"),
        _changed_body(by_name["summary_recorded"], text="in clear"),
    ]
    _, body = sealed_spec.read_value(bytes.fromhex(answer["value_hex"]))["body"]
    short_nonce = _changed_body(answer, sealed={**body["sealed"], "nonce": bytes(8)})
    for value in [*disagreeing, *beside, short_nonce]:
        with pytest.raises(MalformedSealError) as refused:
            sealed_spec.open_value(value, KEY)
        assert isinstance(refused.value, SealedRecordError)
        assert refused.value.code == "malformed_seal"
