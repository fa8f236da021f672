"""The demo's third conversation: Claude with extended thinking and parallel tool calls, appended
in Anthropic's own format, served back to Claude (thinking and signatures verbatim) and then to
an OpenAI model (thinking dropped, never turned into text; the tool pairs kept)."""

from __future__ import annotations

import json
from typing import Any

from convlog.runtime.serve import Service
from events.formats.rendering import Target
from events.keys import ConversationKey
from events.producer import Appended, ConversationProducer
from projectors.tokens import cached_counter, model_spec
from query_api.context import assemble
from query_api.context_types import ContextRequest

CLAUDE = "claude-sonnet-4-5"
_WIDTH = 110
SYSTEM_PROMPT = "你是差旅助手。查询天气时并行调用 get_weather，每个城市一次。"
# What a chat app holds after two requests to the Messages API with thinking enabled: the user's
# question, Claude's first answer (thinking, then two parallel tool_use blocks), the results in
# one user message, Claude's final answer, and the next question.
PAYLOADS: list[dict[str, Any]] = [
    {"role": "user", "content": "我明天去北京和上海出差，两地天气怎么样？"},
    {
        "id": "msg_01DemoThinkingTools",
        "type": "message",
        "role": "assistant",
        "model": CLAUDE,
        "content": [
            {
                "type": "thinking",
                "thinking": "用户要两个城市的天气：北京、上海。两次查询互不依赖，可以并行。",
                "signature": "EuYBCkQYAiJAdemo0signature0bound0to0the0model0that0made0it0verbatim0only==",
            },
            {"type": "tool_use", "id": "toolu_01Beijing", "name": "get_weather", "input": {"city": "北京"}},
            {"type": "tool_use", "id": "toolu_01Shanghai", "name": "get_weather", "input": {"city": "上海"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 70,
            "output_tokens": 148,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
        },
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01Beijing", "content": "晴，-2°C 到 6°C，北风 3 级"},
            {"type": "tool_result", "tool_use_id": "toolu_01Shanghai", "content": "小雨，7°C 到 11°C"},
        ],
    },
    {
        "id": "msg_01DemoFinalAnswer",
        "type": "message",
        "role": "assistant",
        "model": CLAUDE,
        "content": [
            {
                "type": "thinking",
                "thinking": "北京冷且干，上海有雨。提醒带伞和厚外套。",
                "signature": "EuYBCkQYAiJAsecond0demo0signature0kept0byte0for0byte0by0convlog0==",
            },
            {"type": "text", "text": "北京明天晴，-2°C 到 6°C，带厚外套；上海小雨，7°C 到 11°C，记得带伞。"},
        ],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 96,
            "output_tokens": 96,
            "cache_read_input_tokens": 64,
            "cache_creation_input_tokens": 0,
        },
    },
    {"role": "user", "content": "那上海后天呢？"},
]


async def append_claude_conversation(producer: ConversationProducer, key: ConversationKey) -> list[Appended]:
    done = [await producer.start_conversation(key, title="出差天气"), await producer.append_system(key, SYSTEM_PROMPT)]
    for payload in PAYLOADS:
        done += await producer.append_native(key, "anthropic", payload)
    return done


async def print_claude_contexts(service: Service, key: ConversationKey) -> None:
    reads = await service.deps.queries.reads()
    for target in (Target("anthropic", CLAUDE, cache=True), Target("chat_completions", "gpt-4o")):
        spec = model_spec(target.model)
        inputs = await reads.context_inputs(key, encoding=spec.encoding)
        assert inputs is not None
        request = ContextRequest(target.model, 8000, reserve_tokens=1000, format=target.format, cache=target.cache)
        ctx = assemble(
            system=inputs.system,
            summary=inputs.summary,
            messages=inputs.messages,
            request=request,
            spec=spec,
            count=cached_counter(spec.encoding),
        )
        e = ctx.estimate
        estimated = (
            ""
            if e is None
            else f", estimated: o200k_base × {e.factor}"
            + (
                f" (calibrated: between the last two answers the prompt Claude reported grew by"
                f" {e.reported_growth} tokens where the estimate said {e.estimated_growth})"
                if e.calibrated_by
                else " (uncalibrated)"
            )
        )
        print(
            f"context for the next turn of {key} — format={target.format}, model {target.model}: "
            f"{ctx.token_count} tokens{estimated}"
        )
        for name, value in ctx.fragment.items():
            print(f"  {name}:")
            for item in value if isinstance(value, list) else [value]:
                line = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
                print(f"    {line if len(line) <= _WIDTH else line[: _WIDTH - 1] + '…'}")
        for d in ctx.dropped:
            print(f"  dropped: {d.what} of {d.message_id} ({d.reason})")
        print()
