"""The SummaryModel contract: one suite, run unchanged against every adapter — the offline model
and the OpenAI-compatible one (against tests/fake_llm.py, a local Chat Completions server) —
then what only a networked model can do: fail, retriably or not."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from events.keys import ConversationKey
from summarizer.errors import LLMRejectedError, LLMUnavailableError
from summarizer.offline_model import OfflineSummaryModel
from summarizer.openai_model import OpenAISummaryModel
from summarizer.plan import SummaryJob
from summarizer.ports import SummaryModel
from tests.fake_llm import FakeLLM

KEY = ConversationKey("acme", "employee-42", "oa")


def job(previous: str | None = None) -> SummaryJob:
    lines = (
        "User: Q1 how do I file overtime?",
        "Assistant: In the HR portal.",
        "User: Q2 who approves it?",
        "Assistant: Your manager.",
    )
    return SummaryJob(KEY, previous, lines, turns=2, covers_through_message_id="m4", covers_through_seq=4)


def openai_model(base_url: str) -> OpenAISummaryModel:
    return OpenAISummaryModel(base_url=base_url, api_key="test", model="fake-model", timeout_s=5, max_retries=0)


@pytest.fixture(params=["offline", "openai"])
async def model(request: pytest.FixtureRequest) -> AsyncIterator[SummaryModel]:
    """Every adapter of the SummaryModel port; the tests below run unchanged against each."""
    if request.param == "offline":
        yield OfflineSummaryModel()
        return
    adapter = openai_model(request.getfixturevalue("fake_llm").base_url)
    yield adapter
    await adapter.close()


async def test_a_model_names_itself_and_its_prompt_for_the_event(model: SummaryModel) -> None:
    # Both are recorded in SummaryRecorded, and the prompt version is part of the event id.
    assert isinstance(model.model, str)
    assert model.model
    assert isinstance(model.prompt_version, str)
    assert model.prompt_version


async def test_a_draft_carries_every_turn_it_folds_in(model: SummaryModel) -> None:
    draft = await model.summarize(job(), max_tokens=200)
    assert draft.text.strip()
    assert "Q1" in draft.text
    assert "Q2" in draft.text


async def test_a_draft_keeps_the_summary_so_far(model: SummaryModel) -> None:
    draft = await model.summarize(job(previous="- Q0 the user introduced themselves"), max_tokens=200)
    assert "Q0" in draft.text


async def test_reported_token_counts_are_counts_or_absent(model: SummaryModel) -> None:
    draft = await model.summarize(job(), max_tokens=200)
    for n in (draft.input_tokens, draft.output_tokens):
        assert n is None or (isinstance(n, int) and n >= 0)


async def test_the_same_job_gets_the_same_draft(model: SummaryModel) -> None:
    # Offline by construction; the OpenAI adapter asks at temperature 0 (the fake answers alike).
    assert await model.summarize(job(), max_tokens=200) == await model.summarize(job(), max_tokens=200)


async def test_an_overloaded_endpoint_is_retriable_and_an_empty_answer_is_not(
    fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = openai_model(fake_llm.base_url)
    try:
        fake_llm.mode = "fail"  # 503
        with pytest.raises(LLMUnavailableError) as unavailable:
            await adapter.summarize(job(), max_tokens=200)
        assert unavailable.value.retriable
        fake_llm.mode = "ok"
        monkeypatch.setattr(fake_llm, "answer_for", lambda body: "  ")
        with pytest.raises(LLMRejectedError) as rejected:  # no summary to record: asking again will not help
            await adapter.summarize(job(), max_tokens=200)
        assert not rejected.value.retriable
    finally:
        await adapter.close()


async def test_an_unreachable_endpoint_is_retriable() -> None:
    adapter = openai_model("http://127.0.0.1:9/v1")  # the discard port: nothing listens
    try:
        with pytest.raises(LLMUnavailableError):
            await adapter.summarize(job(), max_tokens=200)
    finally:
        await adapter.close()
