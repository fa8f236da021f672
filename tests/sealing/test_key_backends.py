"""What each key backend promises beyond the contract: the file forgets a destroyed key's
bytes at once; the topic is compacted within the configured lag; an unreachable Kafka is a
retriable error."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from events.errors import KeyStoreError, KeyStoreUnavailableError
from events.sealing.file_keys import FileKeyRecordLog
from events.sealing.kafka_keys import KafkaKeyRecordLog
from events.sealing.ports import KeyRecord
from tests.support import unique_topic


async def test_the_file_holds_no_byte_of_a_record_once_it_is_replaced(tmp_path: Path) -> None:
    records = FileKeyRecordLog(tmp_path / "convlog.events.keys")
    secret = b"wrapped-bytes-of-a-user-key-0123456789"
    await records.put([KeyRecord("uk_1", secret)])
    assert base64.b64encode(secret) in records.path.read_bytes()
    await records.put([KeyRecord("uk_1", b"destroyed")])
    on_disk = b"".join(p.read_bytes() for p in tmp_path.iterdir())  # the lock file and any leftover included
    assert base64.b64encode(secret) not in on_disk
    assert secret not in on_disk


async def test_a_read_only_file_is_never_written(tmp_path: Path) -> None:
    records = FileKeyRecordLog(tmp_path / "log" / "convlog.events.keys", read_only=True)
    assert list(await records.load()) == []
    with pytest.raises(KeyStoreError, match="read-only"):
        await records.put([KeyRecord("uk_1", b"x")])
    assert not (tmp_path / "log").exists()


async def test_a_file_that_is_not_a_keys_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "convlog.events.keys"
    path.write_text('{"format": "something else"}')
    with pytest.raises(KeyStoreError, match="not a convlog keys file"):
        await FileKeyRecordLog(path).load()


@pytest.mark.kafka
async def test_the_keys_topic_is_compacted_within_the_lag(kafka_bootstrap: str) -> None:
    topic = unique_topic("keys")
    records = await KafkaKeyRecordLog.connect(bootstrap=kafka_bootstrap, topic=topic, compaction_lag_s=600)
    await records.close()
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        await admin.close()
    assert len(described["partitions"]) == 1
    configs = {e["config_names"]: e["config_value"] for e in response.to_object()["resources"][0]["config_entries"]}
    assert configs["cleanup.policy"] == "compact"
    assert configs["min.compaction.lag.ms"] == "0"
    assert configs["max.compaction.lag.ms"] == "600000"
    assert configs["segment.ms"] == "600000"
    assert configs["file.delete.delay.ms"] == "60000"  # replaced segment files: gone within a minute


async def test_an_unreachable_kafka_is_retriable() -> None:
    with pytest.raises(KeyStoreUnavailableError):
        await KafkaKeyRecordLog.connect(bootstrap="127.0.0.1:9", topic="convlog.events.keys", timeout_s=2)
