"""convlog's query API: the HTTP app (``create_app`` with its ``ApiDeps``), context assembly
and its request/response types.

``create_app`` and ``ApiDeps`` (FastAPI behind them) and the assembler (tiktoken) are imported
on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from query_api.context import NeedOlderMessagesError, assemble
    from query_api.http import ApiDeps, ApiError, create_app
    from query_api.model import (
        Context,
        ContextBudgetExceededError,
        ContextRequest,
        ReasoningPolicy,
        StoredMessage,
        StoredSummary,
    )
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
            "Context": "query_api.model",
            "ContextBudgetExceededError": "query_api.model",
            "ContextRequest": "query_api.model",
            "ReasoningPolicy": "query_api.model",
            "StoredMessage": "query_api.model",
            "StoredSummary": "query_api.model",
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
