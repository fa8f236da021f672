"""Anthropic's own JSON in and out of convlog, offline: append what the Messages API returned
(``message.model_dump()``) and the tool results as the next user message, then read the context
back in every format. Claude's signed thinking goes back only to the model that wrote it; to
any other model or format it is dropped, never re-rendered as text, and listed in ``dropped``.

The payloads are written out here (no provider, no key). Needs a running ``convlog serve``:

    CONVLOG_URL=http://127.0.0.1:8080 CONVLOG_TOKEN=... python examples/python/native_anthropic.py
"""

from __future__ import annotations

from _round_trip import round_trip

CLAUDE = "claude-sonnet-4-5"
QUESTION = {"role": "user", "content": "Weather in Paris?"}
TOOL_USE = {  # a Message as the SDK returns it: signed thinking, then a tool call
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": CLAUDE,
    "stop_reason": "tool_use",
    "content": [
        {"type": "thinking", "thinking": "The user wants the weather.", "signature": "EqQBCkYIBxgCKkA"},
        {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
    ],
    "usage": {"input_tokens": 412, "output_tokens": 90},
}
TOOL_RESULT = {
    "role": "user",
    "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "sunny, 21°C"}],
}
ANSWER = {
    "id": "msg_02",
    "type": "message",
    "role": "assistant",
    "model": CLAUDE,
    "stop_reason": "end_turn",
    "content": [{"type": "text", "text": "It is sunny and 21°C in Paris."}],
    "usage": {"input_tokens": 530, "output_tokens": 12},
}
# Each format for a model of its provider, and Claude's format for another Claude
TARGETS = [
    ("anthropic", CLAUDE),
    ("chat_completions", "gpt-4o"),
    ("responses", "gpt-5"),
    ("gemini", "gemini-2.5-pro"),
    ("anthropic", "claude-opus-4-1"),
]


def main() -> None:
    contexts = round_trip("anthropic", [QUESTION, TOOL_USE, TOOL_RESULT, ANSWER], TARGETS)
    thinking = contexts["anthropic", CLAUDE].messages[1]["content"][0]
    print(f"back to {CLAUDE}: its thinking, signature byte-identical: {thinking['signature']}")


if __name__ == "__main__":
    main()
