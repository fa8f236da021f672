"""aiokafka's failures and records as the event-log port's: a failure as the ``ConvlogError``
tree (its retriable flag kept), a consumed record as a :class:`~events.log.LogRecord`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiokafka.errors import MessageSizeTooLargeError, RecordTooLargeError

from events.errors import LogError, LogUnavailableError
from events.log import LogRecord


def convert_kafka_error(e: BaseException, *, action: str) -> LogError:
    """Map an aiokafka failure to the convlog tree, keeping Kafka's own retriable flag."""
    if isinstance(e, MessageSizeTooLargeError | RecordTooLargeError):
        return LogError(f"{action}: the broker refused the record as too large ({e})")
    if isinstance(e, TimeoutError) or getattr(e, "retriable", False) or type(e).__name__ == "KafkaTimeoutError":
        return LogUnavailableError(f"{action}: Kafka did not acknowledge in time or is unreachable ({e!r})")
    return LogError(f"{action}: {e!r}")


def to_log_record(m: Any) -> LogRecord:
    """An aiokafka ConsumerRecord as the port's LogRecord."""
    return LogRecord(
        partition=m.partition,
        offset=m.offset,
        key=m.key or b"",
        value=m.value or b"",
        timestamp=datetime.fromtimestamp(m.timestamp / 1000, UTC),
        headers=tuple((name, value or b"") for name, value in (m.headers or ())),
    )
