"""The sealed-record golden vector: ``python -m tests.sealed_vectors`` writes
``schemas/vectors/sealed.json`` (``tests/test_sealed_vectors.py`` checks the committed file is
what it writes now, and that every record opens to its plain record).

Each record is one of the golden turn's events (``tests/vectors.py``: its key, ids and times)
or a summary, sealed by docs/producers.md's "Sealed records (schema v5)" (``tests/sealed_spec.py``)
under a FIXED TEST-ONLY key with a FIXED TEST-ONLY nonce per record, so that a producer in
another language can be checked byte for byte. A real producer draws a fresh random nonce for
every seal and never reuses one under a key; these key and nonce bytes are public and worthless.
"""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from typing import Any, Final

from events.codec import default_codec
from events.event_types import Event, SummaryRecorded
from tests import sealed_spec, vectors

SEALED_FILE: Final = vectors.VECTORS / "sealed.json"

# TEST ONLY: public, fixed values. Never seal anything real with them.
TEST_KEY_ID: Final = "ck_" + "7e57" * 8
TEST_KEY: Final = bytes(range(32))
# One record of the turn per sealed shape: a title and metadata, a user's text, a tool call with
# reasoning, a tool result, an answer with metadata, native blocks with signatures.
TURN_RECORDS: Final = (
    "conversation_started",
    "user_message",
    "assistant_tool_call",
    "tool_result",
    "assistant_answer",
    "native_assistant_with_reasoning",
)
MORE_RECORDS: Final = ("user_message_with_image_parts", "native_responses_assistant", "native_gemini_media_and_opaque")


def test_nonce(index: int) -> bytes:
    """TEST ONLY: record ``index`` (from 1) is sealed with the nonce ``00…0index``, 12 bytes."""
    return index.to_bytes(sealed_spec.NONCE_BYTES, "big")


def summary_event() -> Event:
    _, last = vectors.turn_events()[-1]
    body = SummaryRecorded(
        summary_id="vec-summary-1",
        text="The user asked how to file overtime; the assistant pointed to OA > Attendance > Overtime.",
        covers_through_message_id=last.event_id,
        model="gpt-4o-mini",
        prompt_version="summary-v3",
        input_tokens=900,
        output_tokens=40,
        summary_tokens=40,
        excluded_message_ids=(),
    )
    return Event("vec-summary-1", last.key, last.occurred_at + timedelta(seconds=1), vectors.PRODUCER, body)


def sealed_inputs() -> list[tuple[str, Event]]:
    turn, more = dict(vectors.turn_events()), dict(vectors.more_events())
    return [
        *((n, turn[n]) for n in TURN_RECORDS),
        *((n, more[n]) for n in MORE_RECORDS),
        ("summary_recorded", summary_event()),
    ]


def _json(value: Any) -> Any:
    """fastavro's shapes as the vectors write them; bytes (the seal's) as hex."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple):
        name, inner = value
        return {name: _json(inner)}
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json(v) for v in value]
    return value


def sealed_vector(index: int, name: str, event: Event) -> dict[str, Any]:
    codec = default_codec()
    plain = codec.encode(event)
    nonce = test_nonce(index)
    sealed = sealed_spec.seal_value(plain, TEST_KEY_ID, TEST_KEY, nonce)
    _, clear = sealed_spec.read_value(sealed)["body"]
    _, body = sealed_spec.read_value(plain)["body"]
    return {
        "name": name,
        "key": str(event.key),
        "event_id": event.event_id,
        "body_type": event.event_type,
        "nonce_hex": nonce.hex(),
        "plain_value_hex": plain.hex(),
        "plaintext_hex": sealed_spec.body_plaintext(event.event_type, body).hex(),
        "associated_data_hex": sealed_spec.associated_data(
            str(event.key), event.event_id, event.event_type, TEST_KEY_ID
        ).hex(),
        "ciphertext_hex": clear["sealed"]["ciphertext"].hex(),
        "clear_body": _json(clear),
        "value_hex": sealed.hex(),
    }


def sealed_document() -> dict[str, Any]:
    codec = default_codec()
    return {
        "about": "Written by `python -m tests.sealed_vectors`; do not edit. See docs/producers.md, "
        "Sealed records (schema v5). TEST ONLY: the key and the nonces are fixed, public values so that "
        "a producer can be checked byte for byte; a real producer never reuses a nonce under a key.",
        "schema": str(sealed_spec.SCHEMA_FILE.relative_to(vectors.REPO)),
        "schema_version": codec.version,
        "fingerprint": codec.fingerprint.hex(),
        "algorithm": "AES-256-GCM",
        "test_only_key": {
            "key_id": TEST_KEY_ID,
            "key_base64": base64.b64encode(TEST_KEY).decode(),
            "key_hex": TEST_KEY.hex(),
        },
        "records": [sealed_vector(i, name, event) for i, (name, event) in enumerate(sealed_inputs(), start=1)],
    }


def render() -> str:
    return json.dumps(sealed_document(), indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    SEALED_FILE.write_text(render(), encoding="utf-8")
    print(f"wrote {SEALED_FILE.relative_to(vectors.REPO)}")


if __name__ == "__main__":
    main()
