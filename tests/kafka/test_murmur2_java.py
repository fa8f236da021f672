"""Partitioning equals the Java client's, checked live against kafka-clients' own Utils.murmur2."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from convlog.embedded.processes import services_root
from devservices.kafka_service import java_executable, kafka_classpath
from events.keys import ConversationKey, murmur2, partition_for_key

pytestmark = pytest.mark.kafka

PROGRAM = Path(__file__).parents[2] / "services" / "kafka" / "Murmur2Vectors.java"
KEY_VECTORS = Path(__file__).parents[2] / "schemas" / "vectors" / "keys.json"  # tests/vectors.py writes it


def _random_keys(n: int) -> list[str]:
    rng = random.Random(20261130)
    alphabet = "abcXYZ019-_:\\/.@ 租户用户会话éß😀"
    keys = []
    for _ in range(n):
        parts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))).strip() or "x" for _ in range(3)]
        keys.append(str(ConversationKey(*parts)))
    return keys


def _java_vectors(keys: list[str]) -> list[dict[str, Any]]:
    """kafka-clients' own murmur2 and partitions of each key (services/kafka/Murmur2Vectors.java)."""
    classpath = kafka_classpath(services_root() / "cache")
    result = subprocess.run(
        [java_executable(), "-cp", classpath, str(PROGRAM)],
        input="\n".join(keys),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    vectors = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert [v["key"] for v in vectors] == keys
    return vectors


def test_the_golden_key_vectors_are_the_java_clients_partitions(kafka_bootstrap: str) -> None:
    golden = json.loads(KEY_VECTORS.read_text(encoding="utf-8"))["keys"]
    for mine, java in zip(golden, _java_vectors([v["key"] for v in golden]), strict=True):
        assert mine["murmur2"] == java["murmur2"], mine["key"]
        common = mine["partitions"].keys() & java["partitions"].keys()
        assert len(common) >= 3
        assert {n: mine["partitions"][n] for n in common} == {n: java["partitions"][n] for n in common}


def test_partitions_equal_the_java_clients_for_random_keys(kafka_bootstrap: str) -> None:
    keys = _random_keys(300)
    vectors = _java_vectors(keys)
    for vector in vectors:
        raw = vector["key"].encode("utf-8")
        assert murmur2(raw) == vector["murmur2"], vector["key"]
        for count, expected in vector["partitions"].items():
            assert partition_for_key(raw, int(count)) == expected
