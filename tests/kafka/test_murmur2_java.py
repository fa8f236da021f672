"""Partitioning equals the Java client's, checked live against kafka-clients' own Utils.murmur2."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from convlog.local.kafka_service import java_executable, kafka_classpath
from convlog.local.processes import services_root
from events.keys import ConversationKey, murmur2, partition_for_key

pytestmark = pytest.mark.kafka

PROGRAM = Path(__file__).parents[2] / "services" / "kafka" / "Murmur2Vectors.java"


def _random_keys(n: int) -> list[str]:
    rng = random.Random(20261130)
    alphabet = "abcXYZ019-_:\\/.@ 租户用户会话éß😀"
    keys = []
    for _ in range(n):
        parts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))).strip() or "x" for _ in range(3)]
        keys.append(str(ConversationKey(*parts)))
    return keys


def test_partitions_equal_the_java_clients_for_random_keys(kafka_bootstrap: str) -> None:
    keys = _random_keys(300)
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
    for vector in vectors:
        raw = vector["key"].encode("utf-8")
        assert murmur2(raw) == vector["murmur2"], vector["key"]
        for count, expected in vector["partitions"].items():
            assert partition_for_key(raw, int(count)) == expected
