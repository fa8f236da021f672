"""The summary model behind any OpenAI-compatible Chat Completions endpoint (``openai`` client).

Temperature 0, a timeout per request, and the client's own retries — exponential backoff with
jitter, honouring ``Retry-After``, only on connection errors, timeouts, 408, 409, 429 and 5xx.
What still fails leaves as :class:`LLMUnavailableError` (retriable: the summarizer backs off
and asks again later) or :class:`LLMRejectedError` (this request will never succeed).
"""

from __future__ import annotations

import openai

from summarizer.errors import LLMRejectedError, LLMUnavailableError
from summarizer.plan import SummaryJob
from summarizer.ports import Draft
from summarizer.prompt import PROMPT_VERSION, build_messages

_RETRIABLE_STATUS = frozenset({408, 409, 429})


class OpenAISummaryModel:
    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        prompt_version: str = PROMPT_VERSION,
    ) -> None:
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries
        )
        self._model = model
        self._prompt_version = prompt_version
        self.base_url = base_url

    @property
    def model(self) -> str:
        return self._model

    @property
    def prompt_version(self) -> str:
        return self._prompt_version

    async def summarize(self, job: SummaryJob, *, max_tokens: int) -> Draft:
        messages = build_messages(job, max_tokens=max_tokens, version=self._prompt_version)
        try:
            response = await self._client.chat.completions.create(
                model=self._model,
                messages=messages,  # type: ignore[arg-type]  # plain dicts are what the API takes
                temperature=0,
            )
        except openai.APIError as e:
            raise convert_openai_error(e, base_url=self.base_url) from e
        text = (response.choices[0].message.content or "").strip() if response.choices else ""
        if not text:
            raise LLMRejectedError(f"{self._model} at {self.base_url} answered no summary text")
        usage = response.usage
        return Draft(
            text=text,
            input_tokens=usage.prompt_tokens if usage else None,
            output_tokens=usage.completion_tokens if usage else None,
        )

    async def close(self) -> None:
        await self._client.close()


def convert_openai_error(e: openai.APIError, *, base_url: str) -> LLMUnavailableError | LLMRejectedError:
    if isinstance(e, openai.APIConnectionError):  # includes timeouts
        return LLMUnavailableError(f"summary model at {base_url} unreachable: {e}")
    if isinstance(e, openai.APIStatusError):
        status = e.status_code
        if status in _RETRIABLE_STATUS or status >= 500:
            return LLMUnavailableError(f"summary model at {base_url} answered {status}: {e.message}")
        return LLMRejectedError(f"summary model at {base_url} refused the request ({status}): {e.message}")
    return LLMRejectedError(f"summary model at {base_url} answered something unusable: {e}")
