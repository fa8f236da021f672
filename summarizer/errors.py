"""Errors of the summarizer; all are :class:`~events.errors.ConvlogError`s."""

from __future__ import annotations

from events.errors import ConvlogError


class SummarizerError(ConvlogError):
    code = "summarizer_error"


class LLMUnavailableError(SummarizerError):
    """The summary model could not answer now (connection refused, timeout, rate limit, 5xx).
    The summarizer backs off and asks again; meanwhile the turns stay in the context raw."""

    code = "llm_unavailable"
    retriable = True


class LLMRejectedError(SummarizerError):
    """The endpoint refused the request for good (bad request, authentication, unknown model)
    or answered nothing usable. Retrying the same request will not help."""

    code = "llm_rejected"
