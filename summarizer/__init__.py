"""convlog's summarizer: the running summary of the turns that left a conversation's window,
written back to the log by a :class:`Summarizer` with a :class:`SummaryModel` (offline, or an
OpenAI-compatible endpoint).

The errors are imported with the package; the rest (tiktoken, openai, the Postgres driver) on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from summarizer.errors import LLMRejectedError, LLMUnavailableError, SummarizerError

if TYPE_CHECKING:
    from summarizer.offline_model import OfflineSummaryModel
    from summarizer.openai_model import OpenAISummaryModel
    from summarizer.ports import Draft, SummaryModel
    from summarizer.runner import Summarizer, SummarizerOptions, SummarizerStats
else:
    from events._lazy import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "Draft": "summarizer.ports",
            "OfflineSummaryModel": "summarizer.offline_model",
            "SummaryModel": "summarizer.ports",
            "OpenAISummaryModel": "summarizer.openai_model",
            "Summarizer": "summarizer.runner",
            "SummarizerOptions": "summarizer.runner",
            "SummarizerStats": "summarizer.runner",
        },
    )

__all__ = [
    "Draft",
    "LLMRejectedError",
    "LLMUnavailableError",
    "OfflineSummaryModel",
    "OpenAISummaryModel",
    "Summarizer",
    "SummarizerError",
    "SummarizerOptions",
    "SummarizerStats",
    "SummaryModel",
]
