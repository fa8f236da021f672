"""Errors of the projection side; all are :class:`~events.errors.ConvlogError`s."""

from __future__ import annotations

from events.errors import ConvlogError


class ProjectionError(ConvlogError):
    code = "projection_error"


class StoreUnavailableError(ProjectionError):
    """Postgres could not be reached or the connection broke; retry with backoff."""

    code = "store_unavailable"
    retriable = True


class PositionConflictError(ProjectionError):
    """The stored position is not the one this consumer expected: another consumer owns the
    partition now (a zombie after a rebalance) or applied it already. Nothing was written;
    reload positions and seek."""

    code = "position_conflict"
    retriable = True


class RecordRefusedError(ProjectionError):
    """Postgres (or the driver, for a value Postgres cannot hold, such as a NUL in text)
    refused the data of a statement: retrying the same rows cannot help. In a batch it is the
    poison of the record whose rows were refused: the store finds that record, dead-letters
    it and parks its conversation (``reason`` says why, without the rows' content)."""

    code = "record_refused"

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class InvariantError(ProjectionError):
    """A decodable event breaks the event model's rules for its conversation (for example a
    summary covering a message the conversation never had). The record goes to dead letters and
    its conversation is parked."""

    code = "invariant_violation"


class MigrationError(ProjectionError):
    code = "migration_error"


class PositionBeyondLogEndError(ProjectionError):
    """A stored position lies past the end of the log: the read models were built from another
    topic (``CONVLOG_TOPIC``) or the topic was deleted and created again. Reading on would skip
    every record up to that position (Kafka resets an out-of-range position to the start), so
    the projector stops instead: point it at the original topic, or rebuild into a new version."""

    code = "position_beyond_log_end"


class VersionBusyError(ProjectionError):
    """Another ``convlog rebuild`` is building this version right now; try again once it ended
    (an interrupted rebuild resumes where it stopped)."""

    code = "version_busy"
    retriable = True
