"""convlog's query API: the HTTP app (``create_app`` with its ``ApiDeps``), context assembly
and its request/response types.

``create_app`` and ``ApiDeps`` (FastAPI behind them) and the assembler (tiktoken) are imported
on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from query_api.context import NeedOlderMessagesError, assemble
    from query_api.context_types import (
        Context,
        ContextBudgetExceededError,
        ContextRequest,
        ReasoningPolicy,
        StoredMessage,
        StoredSummary,
    )
    from query_api.http import ApiDeps, ApiError, create_app
else:
    from events._lazy import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "NeedOlderMessagesError": "query_api.context",
            "assemble": "query_api.context",
            "ApiDeps": "query_api.http",
            "ApiError": "query_api.http",
            "create_app": "query_api.http",
            "Context": "query_api.context_types",
            "ContextBudgetExceededError": "query_api.context_types",
            "ContextRequest": "query_api.context_types",
            "ReasoningPolicy": "query_api.context_types",
            "StoredMessage": "query_api.context_types",
            "StoredSummary": "query_api.context_types",
        },
    )

__all__ = [
    "ApiDeps",
    "ApiError",
    "Context",
    "ContextBudgetExceededError",
    "ContextRequest",
    "NeedOlderMessagesError",
    "ReasoningPolicy",
    "StoredMessage",
    "StoredSummary",
    "assemble",
    "create_app",
]
