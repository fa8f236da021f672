"""What a live read refuses: the domain's word for it, with the facts a caller needs. The HTTP
API gives each its status and body in one place (query_api/http/app.py)."""

from __future__ import annotations

from events.errors import ConvlogError


class ConversationNotFoundError(ConvlogError):
    """The read models (or the log) hold no such conversation, or none of it before the point a
    rebuilt context was asked for."""

    code = "conversation_not_found"


class NotCaughtUpError(ConvlogError):
    """The projection did not reach an offset of ``partition`` within the bounded wait:
    ``projected`` is its next offset there when the wait says so (None: not said). The
    projectors are behind or not running (they may run in other processes); retry later."""

    code = "not_caught_up"
    retriable = True

    def __init__(self, message: str, *, partition: int, projected: int | None = None) -> None:
        super().__init__(message)
        self.partition = partition
        self.projected = projected


class UnknownVersionError(ConvlogError):
    """A context was asked for as read-models version ``version`` served it, and that version
    never served contexts."""

    code = "unknown_version"

    def __init__(self, version: int) -> None:
        super().__init__(f"read-models version {version} never served contexts")
        self.version = version


class ConversationParkedError(ConvlogError):
    """Read-your-writes on a parked conversation: its records from dead letter
    ``dead_letter_id`` (at ``partition``/``offset``, ``error_code``) on are held, so no context
    reflects the asked-for offset until an operator releases or skips the letter."""

    code = "conversation_parked"

    def __init__(self, *, dead_letter_id: int, partition: int, offset: int, error_code: str, min_offset: int) -> None:
        super().__init__(
            f"the conversation is parked behind dead letter {dead_letter_id} (partition {partition}, offset {offset}, "
            f"{error_code}): its events from there on are held, so no context reflects offset {min_offset} until an "
            "operator releases or skips it (convlog dead-letters)"
        )
        self.dead_letter_id, self.partition, self.offset = dead_letter_id, partition, offset
        self.error_code = error_code
