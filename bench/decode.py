"""What decoding one event costs: µs per ``EventCodec.decode`` of bench/project.py's two message
shapes (a user question; an assistant answer with model and finish_reason), the strict reader
alone (events/avro_reader.py: the Avro body to a record), and fastavro's ``schemaless_reader``
on the same bytes for reference (its Cython reader: no strictness, no validation, no event
objects). Best of 5 runs of N decodes each; no services needed.

    python bench/decode.py [-n N]
"""

from __future__ import annotations

import argparse
import io
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from fastavro import parse_schema, schemaless_reader

from events.codec import HEADER_SIZE, default_codec
from events.event_types import Event, MessageAppended
from events.keys import ConversationKey

TEXT = "提交之后审批流程是怎样的？外包员工需要驻场负责人先确认，再由直属主管和供应商管理员审批。"  # as bench/project.py
SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def best_us(decode: Callable[[bytes], object], data: bytes, n: int) -> float:
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            decode(data)
        runs.append((time.perf_counter() - started) / n * 1e6)
    return min(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=50_000)
    n = parser.parse_args().n
    codec = default_codec()
    newest = max(SCHEMAS.glob("event.v*.avsc"), key=lambda p: int(p.name.split(".")[1][1:]))
    schema = parse_schema(json.loads(newest.read_text(encoding="utf-8")))
    key, at = ConversationKey("bench", "user-5", "conv-17"), datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)
    bodies = {
        "user": MessageAppended("6f1c3f0e-3c1b-4bb4-9d55-0d6b1f2f7a01", "user", f"1: {TEXT}"),
        "assistant": MessageAppended(
            "1b0d9a2c-5f4e-4d8a-8c3b-7e2a9f6d4c10",
            "assistant",
            f"2: {TEXT * 2}",
            model="gpt-4o-mini",
            finish_reason="stop",
        ),
    }
    read = codec._current.read  # the reader alone, without the event the record becomes
    print("| message | bytes | decode µs | strict read µs | fastavro schemaless_reader µs |")
    print("|---|---|---|---|---|")
    for name, body in bodies.items():
        data = codec.encode(Event("0d3c9e5a-8f1b-4a6e-b2c7-5d4e3f2a1b09", key, at, "bench", body))
        decode_us = best_us(codec.decode, data, n)
        read_us = best_us(lambda d: read(d, HEADER_SIZE), data, n)
        fastavro_us = best_us(lambda d: schemaless_reader(io.BytesIO(d[HEADER_SIZE:]), schema, None), data, n)
        print(f"| {name} | {len(data)} | {decode_us:.2f} | {read_us:.2f} | {fastavro_us:.2f} |")


if __name__ == "__main__":
    main()
