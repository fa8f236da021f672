"""Appending a Chat Completions response as it comes from the ``openai`` SDK (or its JSON)."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.chat import ChatCompletion

from events.embedded_log import EmbeddedEventLog
from events.errors import InvalidEventError
from events.event_types import MessageAppended, ToolCall, Usage
from events.keys import ConversationKey
from events.producer import ConversationProducer
from events.reading import conversation_events

KEY = ConversationKey("acme", "u1", "c1")
RESPONSE: dict[str, Any] = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion",
    "created": 1741570283,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "tool_calls": [
                    {
                        "id": "call_abc",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
            "logprobs": None,
        }
    ],
    "usage": {
        "prompt_tokens": 1117,
        "completion_tokens": 46,
        "total_tokens": 1163,
        "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    },
}


async def stored(log: EmbeddedEventLog) -> list[tuple[str, MessageAppended]]:
    out = []
    async for _, event in conversation_events(log, KEY):
        assert isinstance(event.body, MessageAppended)
        out.append((event.event_id, event.body))
    return out


async def test_an_sdk_completion_is_stored_with_its_calls_usage_model_and_finish_reason(log: EmbeddedEventLog) -> None:
    producer = ConversationProducer(log, producer="app")
    await producer.append_completion(KEY, ChatCompletion.model_validate(RESPONSE), thinking_duration_ms=420)
    [(_, body)] = await stored(log)
    assert body.role == "assistant"
    assert body.tool_calls == (ToolCall("call_abc", "get_weather", '{"city": "Paris"}'),)
    assert body.finish_reason == "tool_calls"
    assert body.model == "gpt-4o-2024-08-06"
    assert body.usage == Usage(prompt_tokens=1117, completion_tokens=46, cached_tokens=1024, reasoning_tokens=0)
    assert body.thinking_duration_ms == 420


async def test_the_same_response_appended_twice_is_one_event_id(log: EmbeddedEventLog) -> None:
    """A retry after a timeout re-sends the same completion: projections apply it once."""
    producer = ConversationProducer(log, producer="app")
    first = await producer.append_completion(KEY, RESPONSE)
    again = await producer.append_completion(KEY, ChatCompletion.model_validate(RESPONSE))
    other = await producer.append_completion(KEY, {**RESPONSE, "id": "chatcmpl-other"})
    assert first.event_id == again.event_id != other.event_id
    assert first.message_id == again.message_id


async def test_reasoning_and_refusals_are_kept_as_the_user_saw_them(log: EmbeddedEventLog) -> None:
    producer = ConversationProducer(log, producer="app")
    deepseek = {
        **RESPONSE,
        "id": "r1",
        "model": "deepseek-reasoner",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "42.", "reasoning_content": "6 times 7"},
            }
        ],
    }
    refused = {
        **RESPONSE,
        "id": "r2",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": None, "refusal": "I can't help with that."},
            }
        ],
    }
    await producer.append_completion(KEY, ChatCompletion.model_validate(deepseek))
    await producer.append_completion(KEY, ChatCompletion.model_validate(refused))
    [(_, reasoned), (_, refusal)] = await stored(log)
    assert (reasoned.content, reasoned.reasoning_content) == ("42.", "6 times 7")
    assert refusal.content == "I can't help with that."


@pytest.mark.parametrize(
    ("completion", "choice", "field"),
    [
        ({**RESPONSE, "choices": []}, 0, "completion.choices"),
        (RESPONSE, 1, "completion.choices"),
        ({**RESPONSE, "choices": [{"index": 0, "finish_reason": "stop"}]}, 0, "completion.choices[0].message"),
        (
            {**RESPONSE, "choices": [{**RESPONSE["choices"][0], "finish_reason": "function_call"}]},
            0,
            "completion.choices[0].finish_reason",
        ),
        ("not a completion", 0, "completion"),
    ],
)
async def test_what_is_not_a_usable_completion_is_refused_with_the_field(
    log: EmbeddedEventLog, completion: Any, choice: int, field: str
) -> None:
    producer = ConversationProducer(log, producer="app")
    with pytest.raises(InvalidEventError) as caught:
        await producer.append_completion(KEY, completion, choice=choice)
    assert caught.value.field == field
    assert await log.end_offsets() == dict.fromkeys(range(4), 0)
