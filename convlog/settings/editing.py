"""``CONVLOG_CONTEXT_EDITING``: the context editing a context request gets by default, written
as the context route's own query parameters (query_api/context_editing.py), checked at start."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from query_api.context_editing import EditingParameterError, policy_from_query

EDITING_EXAMPLE = "clear_tool_results_trigger=100000&clear_tool_results_keep=3"


def _valid(value: str | None) -> str | None:
    try:
        policy_from_query(value)
    except EditingParameterError as e:
        raise ValueError(str(e)) from None
    return value


EditingSpec = Annotated[str | None, AfterValidator(_valid)]
