"""The convlog exception tree.

Every error convlog raises is a :class:`ConvlogError`: it has a stable ``code`` (the one the
HTTP API answers with) and ``retriable``, which tells a caller whether trying the same
operation again (with the same ``event_id``) can succeed. Driver exceptions (aiokafka, the Postgres driver,
fastavro, openai) are converted at the edge with ``raise ... from e`` so callers never have
to know which driver sits underneath (Postgres: :func:`pgstore.pool.convert_pg_error` and
the :func:`pgstore.pool.pg_errors` block around a read). Misuse by the calling code — an
argument of the wrong type or out of range, a broken internal invariant — raises Python's own
``TypeError``/``ValueError``/``AssertionError``, like any library: those are bugs to fix, not
conditions to handle.

The whole tree, with the module each class lives in (the imports point one way, so the
classes of the upper packages cannot live here; ``tests/test_error_tree.py`` checks that this
list is exactly the classes the packages define, with these parents)::

    * ConvlogError — events.errors
      * ConfigurationError — events.errors
        * SettingsError — convlog.settings.declared
      * InvalidEventError — events.errors, also a ValueError
        * EventTooLargeError — events.errors
        * InvalidKeyError — events.errors
        * NativeFormatError — events.errors
      * NotJsonError — events.strict_json, also a ValueError
      * InvalidRequestError — events.errors, also a ValueError
        * OffsetBeyondLogEndError — query_api.as_of
        * NoRoomError — query_api.context_types
        * EditingParameterError — query_api.context_editing
      * DecodeError — events.errors
        * UnknownSchemaError — events.errors
        * CorruptRecordError — events.errors
        * UndecodableRecordError — events.errors
        * SealedRecordError — events.errors
          * UnknownKeyError — events.errors
          * UnauthenticSealError — events.errors
          * MalformedSealError — events.errors
      * KeyStoreError — events.errors
        * KeyStoreUnavailableError — events.errors, retriable
        * KeyDestroyedError — events.errors
        * SubjectNotFoundError — events.errors
      * LogError — events.errors
        * LogUnavailableError — events.errors, retriable
          * LogStorageFullError — events.errors, retriable
        * LogClosedError — events.errors
        * LogLockedError — events.errors
        * LogCorruptError — events.errors
        * LogBehindReadModelsError — events.errors, retriable
      * ProjectionError — projectors.errors
        * StoreUnavailableError — projectors.errors, retriable
        * PositionConflictError — projectors.errors, retriable
        * RecordRefusedError — projectors.errors
        * InvariantError — projectors.errors
        * MigrationError — projectors.errors
        * PositionBeyondLogEndError — projectors.errors
        * VersionBusyError — projectors.errors, retriable
        * PoisonRecordError — projectors.fold
        * TopicMismatchError — pgstore.topics
      * ContextBudgetExceededError — query_api.context_types
      * NeedOlderMessagesError — query_api.context
      * UnknownMessageError — query_api.as_of
      * ClientDisconnectedError — query_api.http.disconnects
      * ConversationNotFoundError — query_api.live.errors
      * NotCaughtUpError — query_api.live.errors, retriable
      * UnknownVersionError — query_api.live.errors
      * ConversationParkedError — query_api.live.errors
      * IdempotencyKeyReusedError — query_api.idempotency
        * IdempotencyKeyErasedError — query_api.idempotency
      * ApiError — query_api.http.deps
      * _BodyRefusedError — query_api.http.middleware, also a starlette HTTPException
        * _BodyTooLargeError — query_api.http.middleware
        * _BodyTimeoutError — query_api.http.middleware
      * _BodyNotJsonError — query_api.http.strict_json, also a starlette HTTPException
      * SummarizerError — summarizer.errors
        * LLMUnavailableError — summarizer.errors, retriable
        * LLMRejectedError — summarizer.errors
      * RetentionError — convlog.jobs.retention
        * ProjectionBehindError — convlog.jobs.retention, retriable
      * ServiceError — convlog.embedded.processes, also a RuntimeError
        * PortTakenError — convlog.embedded.processes
      * _HeadTooLargeError — convlog.runtime.http_server, also a ValueError
      * ClientError — convlog.client.errors
        * UnreachableError — convlog.client.errors, retriable
          * ClientTimeoutError — convlog.client.errors, retriable
        * ServiceUnavailableError — convlog.client.errors, retriable
        * UnauthorizedError — convlog.client.errors
        * NotFoundError — convlog.client.errors
        * ConflictError — convlog.client.errors
        * RejectedEventError — convlog.client.errors
        * RejectedRequestError — convlog.client.errors
        * BudgetExceededError — convlog.client.errors
        * ServerError — convlog.client.errors
        * UnexpectedResponseError — convlog.client.errors

The ``ClientError`` subtree is what the HTTP client (:mod:`convlog.client`) raises: the class by
the answer's status, the instance's ``code`` the server's own; ``RejectedEventError`` and
``RejectedRequestError`` are also an ``InvalidEventError`` and an ``InvalidRequestError`` (a
second parent in the tree), so code that catches the producer's errors catches the client's.
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


class NativeFormatError(InvalidEventError):
    """A payload in a provider's native format (``?format=anthropic|responses|gemini``) breaks
    that format's rules. ``code`` names the rule broken (stable, e.g. ``orphan_tool_result``),
    ``field`` its JSON path in the payload; nothing of the payload was stored."""

    code = "invalid_native_payload"

    def __init__(self, message: str, *, field: str | None, code: str | None = None) -> None:
        super().__init__(message, field=field)
        if code is not None:
            self.code = code


class InvalidKeyError(InvalidEventError):
    """A conversation key (tenant, user, conversation) is empty or cannot be parsed."""

    code = "invalid_key"


class InvalidRequestError(ConvlogError, ValueError):
    """A read was asked for with an argument it cannot take: a model name, a text encoding, a
    list cursor this service did not make, a page size out of range (HTTP 422)."""

    code = "invalid_request"


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


class UndecodableRecordError(DecodeError):
    """A conversation's record, read back from the log for an audit read, cannot be decoded by
    this build: the projection dead-lettered it at these coordinates (``convlog dead-letters``)."""

    code = "undecodable_record"

    def __init__(self, partition: int, offset: int, cause: DecodeError) -> None:
        super().__init__(
            f"partition {partition} offset {offset} holds a record of this conversation that cannot be decoded "
            f"({cause}); it is a dead letter: `convlog dead-letters list` shows it"
        )
        self.partition = partition
        self.offset = offset


class SealedRecordError(DecodeError):
    """A sealed record (schema v5, ``events.sealing``) cannot be opened: the projection
    dead-letters it; it is never served in part and never served as plaintext."""

    code = "sealed_record"


class UnknownKeyError(SealedRecordError):
    """The record is sealed under a key id the key store has never held (a foreign producer's
    made-up id, or a key store restored from a backup older than the record)."""

    code = "unknown_key"


class UnauthenticSealError(SealedRecordError):
    """The ciphertext fails authentication: a flipped bit, or a record moved to another
    conversation or event id (the associated data binds it to both)."""

    code = "seal_unauthentic"


class MalformedSealError(SealedRecordError):
    """A sealed record breaks the envelope: a bad nonce, a plaintext that is no body of the
    record's type, content beside the seal, or clear fields that disagree with the sealed body."""

    code = "malformed_seal"


class KeyStoreError(ConvlogError):
    """The key store (``events.sealing``): data keys, their wrapping and their destruction."""

    code = "key_store_error"


class KeyStoreUnavailableError(KeyStoreError):
    """The key store's backend (the keys topic, the keys file, a KMS) cannot be reached now."""

    code = "key_store_unavailable"
    retriable = True


class KeyDestroyedError(KeyStoreError):
    """Asked to seal with, or hand out, a key that erasure destroyed."""

    code = "key_destroyed"


class SubjectNotFoundError(KeyStoreError):
    """Nothing is known of this subject (no key, no conversation): erasing it is a 404."""

    code = "subject_not_found"


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
