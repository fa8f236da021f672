"""How long an append waits for Kafka's acknowledgement is a setting, and the client's default
retry budget outlasts its default: a client gives up on an append only once the service has."""

from __future__ import annotations

import pytest

from convlog.client.retry import RetryPolicy
from convlog.settings import Settings
from convlog.wiring import make_producer, open_event_log
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from tests.support import unique_topic

pytestmark = pytest.mark.kafka


def test_the_clients_default_budget_outlasts_the_services_default_ack_wait() -> None:
    policy, settings = RetryPolicy(), Settings()
    assert policy.total_s > settings.kafka_ack_timeout_s + policy.max_backoff_s  # and one more try starts after it


async def test_the_ack_wait_setting_reaches_the_log_serve_appends_through(kafka_bootstrap: str) -> None:
    # A broker that never acknowledges takes a private, stoppable broker (tests/kafka/test_broker_restart.py
    # shows the give-up itself, at the wait KafkaEventLog is given); this checks the setting is that wait.
    settings = Settings(
        kafka_bootstrap=kafka_bootstrap, topic=unique_topic("ackwait"), partitions=1, kafka_ack_timeout_s=1.5
    )
    event_log = await open_event_log(settings)
    try:
        assert isinstance(event_log, KafkaEventLog)
        assert event_log._deadlines.timeout_s == 1.5  # the wait has no public face but its error
        appended = await make_producer(event_log, settings, producer="ackwait-test").append_user(
            ConversationKey("acme", "u", "c"), "hello"
        )
        assert appended.offset == 0  # a broker that acknowledges is waited for as before
    finally:
        await event_log.close()
