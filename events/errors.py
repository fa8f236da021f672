"""The convlog exception tree.

Every error convlog raises is a :class:`ConvlogError`. Driver exceptions (aiokafka, psycopg,
fastavro, openai) are converted at the edge with ``raise ... from e`` so callers never have
to know which driver sits underneath. ``retriable`` tells a caller whether trying the same
operation again (with the same ``event_id``) can succeed.
"""

from __future__ import annotations


class ConvlogError(Exception):
    """Base class of every error convlog raises."""

    code: str = "convlog_error"
    retriable: bool = False


class ConfigurationError(ConvlogError):
    """A setting is missing, malformed or inconsistent."""

    code = "configuration_error"


class InvalidEventError(ConvlogError, ValueError):
    """An event was refused before it reached the log. ``field`` names the offending input."""

    code = "invalid_event"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = message


class EventTooLargeError(InvalidEventError):
    """The encoded event is larger than the configured maximum."""

    code = "event_too_large"

    def __init__(self, *, size: int, limit: int) -> None:
        super().__init__(f"encoded event is {size} bytes, the limit is {limit} bytes", field="event")
        self.size = size
        self.limit = limit


class InvalidKeyError(InvalidEventError):
    """A conversation key (tenant, user, conversation) is empty or cannot be parsed."""

    code = "invalid_key"


class DecodeError(ConvlogError):
    """A stored record could not be decoded into an event."""

    code = "decode_error"


class UnknownSchemaError(DecodeError):
    """The record names a writer schema (by fingerprint) this build does not know."""

    code = "unknown_schema"

    def __init__(self, fingerprint: bytes) -> None:
        super().__init__(f"no known schema has fingerprint {fingerprint.hex()}")
        self.fingerprint = fingerprint


class CorruptRecordError(DecodeError):
    """The record is truncated, has a bad header, or its body does not match its schema."""

    code = "corrupt_record"


class LogError(ConvlogError):
    """The event log failed."""

    code = "log_error"


class LogUnavailableError(LogError):
    """The log could not be reached or did not acknowledge in time.

    The append may or may not have been written: retry it with the same ``event_id`` —
    projections ignore a repeated ``event_id``, so a retry never doubles a message.
    """

    code = "log_unavailable"
    retriable = True


class LogClosedError(LogError):
    """The log was used after ``close()``."""

    code = "log_closed"


class LogLockedError(LogError):
    """The embedded log file is already open in another process."""

    code = "log_locked"


class LogCorruptError(LogError):
    """The embedded log file holds damaged frames followed by intact ones: not a torn tail that
    can be cut, but records that may have been acknowledged. The file is left untouched;
    ``convlog log check`` shows the damage and ``convlog log repair`` moves it aside."""

    code = "log_corrupt"


class LogStorageFullError(LogUnavailableError):
    """The log's disk (or quota, or file-size limit) is full. Nothing of the append was kept;
    retry once space is freed — the log takes appends again without a restart."""

    code = "log_storage_full"


class LogBehindReadModelsError(LogError):
    """The log ends before positions the read models already applied: records were lost from the
    log (a cut file, an older copy restored, an unclean Kafka leader election). Appends are
    refused so that no new record takes a lost offset, until an operator restores the log or
    rebuilds the read models from it (``convlog rebuild read_models --new --switch``) and restarts the service."""

    code = "log_behind_read_models"
    retriable = True  # the same request succeeds once the operator has resolved it
    retry_after_s = 30
