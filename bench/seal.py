"""What sealing costs per message, next to raw AES-256-GCM on the same bytes, same run.

For bench/project.py's two message shapes (a user question; an assistant answer with model
and finish_reason), in µs per message, best of 5 runs of N each (no services needed):

* **produce**: ``EventAppender.build`` (validate, seal, encode) with a key store, and without
  one: the difference is what sealing adds to an append. Beside it ``seal_event`` alone, and
  cryptography's ``AESGCM.encrypt`` of the same plaintext (the body's Avro) with the object
  made once, and made per call (as ``events.sealing.envelope.seal_bytes`` does).
* **project**: ``EventCodec.decode`` of the sealed record with the key ring, and of the plain
  record: the difference is what opening adds to decoding; ``AESGCM.decrypt`` of the same
  ciphertext beside it.
* **read-model rows**: ``RowSealer.seal`` (what the projector stores for a sealed message) and
  ``RowSealer.open`` (what every read of a sealed row does), beside ``AESGCM`` on the same
  packed columns.

    python bench/seal.py [-n N]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import cast

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from table import Row, print_table

from events.appending import EventAppender
from events.codec import default_codec
from events.event_types import Event, MessageAppended
from events.keys import ConversationKey
from events.log import EventLog
from events.sealing.bodies import seal_event
from events.sealing.envelope import record_associated_data
from events.sealing.key_store import SubjectKeyStore
from events.sealing.keys import DataKey
from events.sealing.local_kek import LocalMasterKey
from events.sealing.memory_keys import MemoryKeyRecordLog
from projectors.row_values import to_json
from projectors.sealed_rows import RowSealer, row_ad

TEXT = "提交之后审批流程是怎样的？外包员工需要驻场负责人先确认，再由直属主管和供应商管理员审批。"  # as bench/project.py
EVENT_ID = "0d3c9e5a-8f1b-4a6e-b2c7-5d4e3f2a1b09"
KEY = ConversationKey("bench", "user-5", "conv-17")


def best_us(step: Callable[[], object], n: int) -> float:
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            step()
        runs.append((time.perf_counter() - started) / n * 1e6)
    return min(runs)


def bodies() -> dict[str, MessageAppended]:
    return {
        "user": MessageAppended("6f1c3f0e-3c1b-4bb4-9d55-0d6b1f2f7a01", "user", f"1: {TEXT}"),
        "assistant": MessageAppended(
            "1b0d9a2c-5f4e-4d8a-8c3b-7e2a9f6d4c10",
            "assistant",
            f"2: {TEXT * 2}",
            model="gpt-4o-mini",
            finish_reason="stop",
        ),
    }


async def key_store() -> tuple[SubjectKeyStore, DataKey]:
    kek = LocalMasterKey.from_setting(base64.b64encode(os.urandom(32)).decode())
    keys = await SubjectKeyStore.open(MemoryKeyRecordLog(), kek)
    return keys, await keys.ensure(KEY)


def measure(name: str, body: MessageAppended, keys: SubjectKeyStore, key: DataKey, n: int) -> dict[str, float]:
    codec = default_codec()
    opening = codec.with_keys(keys)
    at = datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)
    log = cast("EventLog", None)  # build() never touches the log
    plain_app = EventAppender(log, codec=codec, producer="bench", new_id=lambda: EVENT_ID, clock=lambda: at)
    sealed_app = EventAppender(log, codec=codec, producer="bench", keys=keys, new_id=lambda: EVENT_ID, clock=lambda: at)
    event = Event(EVENT_ID, KEY, at, "bench", body)
    plain_data = codec.encode(event)
    sealed_event = seal_event(event, key, codec)
    sealed_data = codec.encode(sealed_event)
    assert opening.decode(sealed_data) == event
    plaintext = codec.encode_body(body)
    ad = record_associated_data(str(KEY), EVENT_ID, "MessageAppended", key.key_id)
    aead, nonce = AESGCM(key.secret), os.urandom(12)
    ciphertext = aead.encrypt(nonce, plaintext, ad)

    sealer = RowSealer(keys)
    fresh = RowSealer(keys, opened_rows_bytes=0)  # opens every time: what a row read the first time costs
    columns = {"content": to_json(body.content), "metadata": "{}"}
    row = sealer.seal("transcript", str(KEY), EVENT_ID, key.key_id, columns)
    assert row is not None
    row_ad_bytes = row_ad(str(KEY), "transcript", EVENT_ID, key.key_id)
    packed = aead.decrypt(row[:12], row[12:], row_ad_bytes)
    r = {
        "build plain": best_us(lambda: plain_app.build(KEY, body), n),
        "build sealed": best_us(lambda: sealed_app.build(KEY, body), n),
        "seal_event": best_us(lambda: seal_event(event, key, codec), n),
        "aesgcm encrypt": best_us(lambda: aead.encrypt(nonce, plaintext, ad), n),
        "aesgcm new+encrypt": best_us(lambda: AESGCM(key.secret).encrypt(nonce, plaintext, ad), n),
        "decode plain": best_us(lambda: codec.decode(plain_data), n),
        "decode sealed": best_us(lambda: opening.decode(sealed_data), n),
        "aesgcm decrypt": best_us(lambda: aead.decrypt(nonce, ciphertext, ad), n),
        "aesgcm new+decrypt": best_us(lambda: AESGCM(key.secret).decrypt(nonce, ciphertext, ad), n),
        "row seal": best_us(lambda: sealer.seal("transcript", str(KEY), EVENT_ID, key.key_id, columns), n),
        "row open": best_us(lambda: fresh.open("transcript", str(KEY), EVENT_ID, key.key_id, row), n),
        "row open kept": best_us(lambda: sealer.open("transcript", str(KEY), EVENT_ID, key.key_id, row), n),
        "row aesgcm encrypt": best_us(lambda: aead.encrypt(row[:12], packed, row_ad_bytes), n),
        "row aesgcm decrypt": best_us(lambda: aead.decrypt(row[:12], row[12:], row_ad_bytes), n),
    }
    print(
        f"{name}: {len(plain_data)} bytes plain, {len(sealed_data)} sealed; "
        + ", ".join(f"{k} {v:.2f}" for k, v in r.items())
    )
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=20_000)
    n = parser.parse_args().n
    keys, key = asyncio.run(key_store())
    results = {name: measure(name, body, keys, key, n) for name, body in bodies().items()}
    rows: list[Row] = []
    for name, r in results.items():
        rows += [
            Row(
                f"{name}: an append's build, sealed / plain (µs)",
                f"{r['build sealed']:.2f} / {r['build plain']:.2f}: +{r['build sealed'] - r['build plain']:.2f} µs",
            ),
            Row(
                f"{name}: seal_event / raw AESGCM.encrypt, object kept / made per call (µs)",
                f"{r['seal_event']:.2f} / {r['aesgcm encrypt']:.2f} / {r['aesgcm new+encrypt']:.2f}",
            ),
            Row(
                f"{name}: a record's decode, sealed with the key ring / plain (µs)",
                f"{r['decode sealed']:.2f} / {r['decode plain']:.2f}: +{r['decode sealed'] - r['decode plain']:.2f} µs",
            ),
            Row(
                f"{name}: raw AESGCM.decrypt of that ciphertext, object kept / made per call (µs)",
                f"{r['aesgcm decrypt']:.2f} / {r['aesgcm new+decrypt']:.2f}",
            ),
            Row(
                f"{name}: a read-model row, RowSealer.seal / raw AESGCM.encrypt (µs)",
                f"{r['row seal']:.2f} / {r['row aesgcm encrypt']:.2f}",
            ),
            Row(
                f"{name}: a read-model row, RowSealer.open / raw AESGCM.decrypt (µs)",
                f"{r['row open']:.2f} / {r['row aesgcm decrypt']:.2f}",
            ),
            Row(f"{name}: a row opened before (kept by the reader), RowSealer.open (µs)", f"{r['row open kept']:.2f}"),
        ]
    print_table(f"Sealing per message, best of 5 x {n} (bench/seal.py)", rows)


if __name__ == "__main__":
    main()
