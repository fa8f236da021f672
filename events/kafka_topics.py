"""The Kafka topic the log is on: created unless it exists (with the settings that keep every
event: :mod:`events.topic_settings`), its partition count read back, and an existing topic's
settings that would lose events logged as warnings."""

from __future__ import annotations

import asyncio

import structlog
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from events.errors import ConfigurationError, LogError, LogUnavailableError
from events.kafka_conversions import convert_kafka_error
from events.topic_settings import CHECKED_SETTINGS, new_topic_configs, topic_risks

log = structlog.get_logger(__name__)

_TOPIC_ALREADY_EXISTS = 36


async def ensure_topic(bootstrap: str, topic: str, partitions: int, *, client_id: str = "convlog") -> int:
    """Create ``topic`` unless it exists, as :meth:`~events.kafka_log.KafkaEventLog.connect` does, for a process
    that only consumes it (``convlog project``): a consumer subscribed to a topic that does not
    exist yet may not see it when it is created (aiokafka learns of it at a metadata refresh at
    best), so a projector started before any API instance could sit idle."""
    try:
        # The settings check is the API's (it starts with the producer): a projector restarts fast.
        return await create_topic(bootstrap, topic, partitions, None, client_id, check_settings=False)
    except KafkaError as e:
        raise convert_kafka_error(e, action=f"creating topic {topic} at {bootstrap}") from e


async def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    replication_factor: int | None,
    client_id: str,
    *,
    check_settings: bool = True,
) -> int:
    """Create ``topic`` unless it exists; return its actual partition count.

    An existing topic keeps its settings; those that would lose events (finite retention,
    compaction, a single in-sync replica among several) are logged as warnings at start.
    """
    if partitions < 1:
        raise ConfigurationError(f"partitions must be >= 1, got {partitions}")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id=f"{client_id}-admin")
    await admin.start()
    try:
        if topic not in await admin.list_topics():
            brokers = len((await admin.describe_cluster()).get("brokers") or ()) or 1
            replicas = replication_factor or min(3, brokers)
            configs = new_topic_configs(replicas)
            response = await admin.create_topics(
                [
                    NewTopic(
                        name=topic,
                        num_partitions=partitions,
                        replication_factor=replicas,
                        topic_configs=configs,
                    )
                ]
            )
            for name, code, *rest in response.topic_errors:
                if code not in (0, _TOPIC_ALREADY_EXISTS):
                    raise LogError(f"creating topic {name} failed: error {code} {rest}")
            log.info("kafka_log.topic_created", topic=topic, partitions=partitions)
        for _ in range(50):  # metadata of a fresh topic propagates asynchronously
            described = await admin.describe_topics([topic])
            found = described[0].get("partitions") if described else None
            if found and described[0].get("error_code", 0) == 0:
                replica_count = len(found[0].get("replicas") or ())
                if check_settings:
                    await _warn_if_settings_lose_events(admin, bootstrap, topic, replicas=replica_count)
                return len(found)
            await asyncio.sleep(0.1)
        raise LogUnavailableError(f"topic {topic} was not visible in metadata after creation")
    finally:
        await admin.close()


async def _warn_if_settings_lose_events(
    admin: AIOKafkaAdminClient, bootstrap: str, topic: str, *, replicas: int
) -> None:
    """One structured warning per setting of ``topic`` that can lose events (see
    :mod:`events.topic_settings`). A broker that refuses to describe the topic (e.g. no
    DescribeConfigs permission) does not stop convlog: that is logged instead."""
    wanted = ConfigResource(ConfigResourceType.TOPIC, topic, configs=dict.fromkeys(CHECKED_SETTINGS))
    try:
        [response] = await admin.describe_configs([wanted])
        [resource] = response.to_object()["resources"]
    except (KafkaError, ValueError, KeyError) as e:
        log.warning("kafka_log.topic_settings_unchecked", topic=topic, error=repr(e))
        return
    if resource.get("error_code", 0) != 0:
        log.warning(
            "kafka_log.topic_settings_unchecked",
            topic=topic,
            error=f"error {resource['error_code']} {resource.get('error_message')}",
        )
        return
    entries = resource["config_entries"]
    configs = {e["config_names"]: e["config_value"] for e in entries if e["config_value"] is not None}
    for risk in topic_risks(configs, replicas=replicas):
        log.warning(
            "kafka_log.topic_setting_loses_events",
            topic=topic,
            setting=risk.setting,
            value=risk.value,
            risk=risk.risk,
            fix=f"kafka-configs.sh --bootstrap-server {bootstrap} --alter --entity-type topics "
            f"--entity-name {topic} --add-config {risk.setting}={risk.safe_value}",
        )
