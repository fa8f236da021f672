"""The summarizer never sends reasoning, signatures, encrypted content or opaque blocks to the
summary model: it reads a native message's Chat Completions view (its text, tool calls and
results), never its blocks. Native messages projected into real Postgres, read by the
summarizer's own store and planner, sent by the real ``openai`` client to a loopback server
(tests/fake_llm.py) that records the request, and drafted by the offline model."""

from __future__ import annotations

import json

import pytest

from events.embedded_log import EmbeddedEventLog
from events.keys import ConversationKey
from events.producer import ConversationProducer
from pgstore.summaries import PostgresSummaryStore
from summarizer.limits import count_tokens
from summarizer.offline_model import OfflineSummaryModel
from summarizer.openai_model import OpenAISummaryModel
from summarizer.plan import plan
from tests.fake_llm import FakeLLM
from tests.native_support import NATIVE_SECRETS, thinking_answer, tool_result
from tests.projection_support import SEED_000_WINDOW, Projection, project_all

pytestmark = pytest.mark.postgres

KEY = ConversationKey("acme", "u1", "claude-chat")


def leaked(text: str) -> list[str]:
    return [secret for secret in NATIVE_SECRETS if secret in text]


async def test_no_reasoning_signature_encrypted_content_or_opaque_block_reaches_the_summary_model(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer, fake_llm: FakeLLM
) -> None:
    for t in range(1, 11):  # ten turns: the first ones leave the window (8, then 6)
        await producer.append_user(KEY, f"Q{t}: weather in Paris and Oslo?", message_id=f"u{t}")
        calls = (f"toolu_{t}a", f"toolu_{t}b")
        await producer.append(KEY, thinking_answer(f"a{t}", call_ids=calls))
        await producer.append(KEY, tool_result(calls[0], f"sunny {t}", message_id=f"ra{t}"))
        await producer.append(KEY, tool_result(calls[1], f"no such city {t}", message_id=f"rb{t}", is_error=True))
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    store = PostgresSummaryStore(projection.pool, consumer="test")
    inputs = await store.summary_inputs(projection.version.schema, KEY, max_rows=1000)
    assert inputs is not None
    job = plan(inputs, max_input_tokens=100_000, count=count_tokens)
    assert job is not None
    lines = "\n".join(job.lines)
    # The conversation is there: questions, the visible answer, the calls and their results...
    for seen in ("Q1: weather", "Let me check both cities.", "get_weather", "sunny 1", "no such city 1"):
        assert seen in lines, seen
    # ...and none of what the blocks hold beyond it.
    assert leaked(lines) == []

    model = OpenAISummaryModel(
        base_url=fake_llm.base_url, api_key="test", model="fake-model", timeout_s=5, max_retries=0
    )
    try:
        draft = await model.summarize(job, max_tokens=300)
    finally:
        await model.close()
    [request] = fake_llm.answered()
    sent = json.dumps(request, ensure_ascii=False)
    assert "Let me check both cities." in sent
    assert leaked(sent) == []
    assert leaked(draft.text) == []
    offline = await OfflineSummaryModel().summarize(job, max_tokens=300)
    assert leaked(offline.text) == []
