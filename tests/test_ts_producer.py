"""examples/ts-producer against the golden vectors, offline: its ``node --test`` encodes the
vectors' events to their exact bytes and partitions every key as they say, and its traps
(kafkajs's LegacyPartitioner, librdkafka's CRC32, a big-endian fingerprint, Confluent framing,
settings that are not safe) each have a test that fails with the wrong setting; its sealer writes
schemas/vectors/sealed.json byte for byte, and what it seals fails to open with a flipped bit or
other associated data. The runs against Kafka are tests/kafka/test_ts_producer.py and
tests/kafka/test_ts_producer_sealed.py."""

from __future__ import annotations

import json
import re

import pytest

from tests.example_producers import REPO, TS_EXAMPLE, build_ts, node_or_skip, run_checked


def test_the_ts_example_bundles_the_newest_schema_unchanged() -> None:
    [bundled] = TS_EXAMPLE.glob("event.v*.avsc")
    newest = max(REPO.glob("schemas/event.v*.avsc"), key=lambda p: int(re.findall(r"\d+", p.name)[0]))
    # A new schema version: copy it into examples/ts-producer, point the example at it, regenerate the vectors.
    assert bundled.name == newest.name
    assert bundled.read_bytes() == newest.read_bytes()
    assert f'"../../{newest.name}"' in (TS_EXAMPLE / "src" / "events.ts").read_text(encoding="utf-8")


def test_the_ts_example_installs_from_its_lock_file_from_the_npm_registry_only() -> None:
    lock = json.loads((TS_EXAMPLE / "package-lock.json").read_text(encoding="utf-8"))
    packages = {name: p for name, p in lock["packages"].items() if name}
    assert packages
    for name, package in packages.items():
        # No tarball from elsewhere (a lock file may leave "resolved" out: the configured registry).
        assert package.get("resolved", "https://registry.npmjs.org/").startswith("https://registry.npmjs.org/"), name
        assert package["integrity"].startswith("sha512-"), name
        assert not package.get("hasInstallScript"), f"{name} runs an install script"


@pytest.mark.slow  # cold: compiles the example (a Go build about a minute; npm ci and tsc seconds)
def test_node_test_passes_on_the_golden_vectors() -> None:
    node, npm = node_or_skip()
    build_ts(node, npm)
    out = run_checked([node, "--test", "dist/test/"], cwd=TS_EXAMPLE, timeout_s=120, what="node --test")
    assert re.search(r"^# fail 0$", out, flags=re.MULTILINE), out
    passed = set(re.findall(r"^ok \d+ - (.+)$", out, flags=re.MULTILINE))
    assert {
        "the turn encodes to the vectors' bytes",
        "the partitioner puts every key on the vectors' partition",
        "trap: kafkajs's LegacyPartitioner and librdkafka's CRC32 put keys on other partitions",
        "the producer has the safe settings: idempotent, acks=all, compression on",
        "trap: the big-endian fingerprint (Java's Long.toHexString order) is not the wire form",
        "the sealer writes schemas/vectors/sealed.json byte for byte",
        "the vectors' ciphertexts open to their plaintexts, and fail with a flipped bit or other associated data",
        "the turn sealed carries no content in clear, a fresh nonce each, and opens only to itself",
        "the key route is asked with the token, the ids percent-encoded; a refused token is an error",
    } <= passed, out
