"""OpenAI Responses JSON in and out of convlog, offline: append the Response the API returned
(``response.model_dump()``: its reasoning item with ``encrypted_content``, its function call) and
the ``function_call_output`` as you send it, then read the context back in every format. The
reasoning item goes back only to OpenAI (to the model that wrote it, when the response names
it); to any other provider or model it is dropped, never re-rendered as text, and listed in
``dropped``.

The payloads are written out here (no provider, no key). Needs a running ``convlog serve``:

    CONVLOG_URL=http://127.0.0.1:8080 CONVLOG_TOKEN=... python examples/python/native_responses.py
"""

from __future__ import annotations

from _round_trip import round_trip

GPT = "gpt-5"
QUESTION = {"role": "user", "content": "Weather in Paris?"}
CALL = {  # a Response: a reasoning item (OpenAI's encrypted blob), then a function call
    "id": "resp_01",
    "object": "response",
    "model": GPT,
    "status": "completed",
    "output": [
        {"type": "reasoning", "id": "rs_01", "summary": [], "encrypted_content": "gAAAAABo_encrypted"},
        {
            "type": "function_call",
            "id": "fc_01",
            "call_id": "call_01",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
            "status": "completed",
        },
    ],
    "usage": {"input_tokens": 80, "output_tokens": 40, "total_tokens": 120},
}
OUTPUT = {"type": "function_call_output", "call_id": "call_01", "output": "sunny, 21°C"}
ANSWER = {
    "id": "resp_02",
    "object": "response",
    "model": GPT,
    "status": "completed",
    "output": [
        {
            "type": "message",
            "id": "msg_01",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "It is sunny and 21°C in Paris.", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 140, "output_tokens": 12, "total_tokens": 152},
}
# Each format for a model of its provider, and the Responses format for another OpenAI model
TARGETS = [
    ("responses", GPT),
    ("chat_completions", "gpt-4o"),
    ("anthropic", "claude-sonnet-4-5"),
    ("gemini", "gemini-2.5-pro"),
    ("responses", "gpt-4o"),
]


def main() -> None:
    contexts = round_trip("responses", [QUESTION, CALL, OUTPUT, ANSWER], TARGETS)
    served = contexts["responses", GPT].input
    print(f"back to {GPT}: {', '.join(str(item.get('type', item.get('role'))) for item in served)}")


if __name__ == "__main__":
    main()
