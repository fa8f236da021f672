"""examples/go-producer against the golden vectors, offline: its ``go test`` encodes the vectors'
events to their exact bytes and partitions every key as they say, and its traps (a CRC32 or
FNV partitioner, a big-endian fingerprint, Confluent framing, settings that are not safe) each
have a Go test that fails with the wrong setting; its sealer writes schemas/vectors/sealed.json
byte for byte. The runs against Kafka are tests/kafka/test_go_producer.py and
tests/kafka/test_go_producer_sealed.py."""

from __future__ import annotations

import re

import pytest

from tests.example_producers import GO_EXAMPLE, REPO, go_env, go_or_skip, run_checked


def test_the_go_example_bundles_the_newest_schema_unchanged() -> None:
    [bundled] = GO_EXAMPLE.glob("event.v*.avsc")
    newest = max(REPO.glob("schemas/event.v*.avsc"), key=lambda p: int(re.findall(r"\d+", p.name)[0]))
    # A new schema version: copy it into examples/go-producer, point the example at it, regenerate the vectors.
    assert bundled.name == newest.name
    assert bundled.read_bytes() == newest.read_bytes()
    assert f"//go:embed {newest.name}" in (GO_EXAMPLE / "events.go").read_text(encoding="utf-8")


@pytest.mark.slow  # cold: compiles the example (a Go build about a minute; npm ci and tsc seconds)
def test_go_test_passes_on_the_golden_vectors() -> None:
    go = go_or_skip()
    # go test caches a pass until a source or a file it read (the vectors) changes.
    out = run_checked([go, "test", "-v", "."], cwd=GO_EXAMPLE, env=go_env(), timeout_s=600, what="go test")
    passed = set(re.findall(r"^--- PASS: (\w+)", out, flags=re.MULTILINE))
    assert {
        "TestTheTurnEncodesToTheVectorsBytes",
        "TestThePartitionerPutsEveryKeyOnTheVectorsPartition",
        "TestTrapOtherHashersPutKeysOnOtherPartitions",
        "TestTheClientHasTheSafeSettings",
        "TestTrapABigEndianFingerprintIsNotTheWireForm",
        "TestTheSealerWritesTheSealedVectorsByteForByte",
        "TestTheVectorsCiphertextsOpenOnlyWithTheirAssociatedData",
        "TestTheTurnSealedCarriesNoContentInClear",
    } <= passed, out
