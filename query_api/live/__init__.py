"""The live-read layer: the query service (``service.py``: the live context, read-your-writes,
the context as served then, a conversation's events from the log), the one wait for the
projection (``wait.py``), the range reading of a live context (``ranges.py``) and what they
refuse (``errors.py``). No HTTP here: the API maps the errors to answers in one place
(query_api/http/app.py)."""

from __future__ import annotations

from query_api.live.errors import (
    ConversationNotFoundError,
    ConversationParkedError,
    NotCaughtUpError,
    UnknownVersionError,
)
from query_api.live.ranges import MAX_NEWEST, NEWEST_FIRST, RowsNeeded, assemble_live
from query_api.live.service import Guard, QueryService, ServedContext, unguarded
from query_api.live.wait import reflects, wait_for_projection

__all__ = [
    "MAX_NEWEST",
    "NEWEST_FIRST",
    "ConversationNotFoundError",
    "ConversationParkedError",
    "Guard",
    "NotCaughtUpError",
    "QueryService",
    "RowsNeeded",
    "ServedContext",
    "UnknownVersionError",
    "assemble_live",
    "reflects",
    "unguarded",
    "wait_for_projection",
]
