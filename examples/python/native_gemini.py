"""Gemini's own JSON in and out of convlog, offline: append the ``GenerateContentResponse`` the API
returned (a function call with its thought signature), the ``functionResponse`` the app sends
back and the answer, then read the context back in every format. Thought signatures go back
only to the model that wrote them; to any other model or format they are dropped.

The payloads are written out here (no provider, no key). Needs a running ``convlog serve``:

    CONVLOG_URL=http://127.0.0.1:8080 CONVLOG_TOKEN=... python examples/python/native_gemini.py
"""

from __future__ import annotations

from _round_trip import round_trip

GEMINI = "gemini-2.5-pro"
QUESTION = {"role": "user", "parts": [{"text": "Weather in Paris?"}]}
CALL = {  # a GenerateContentResponse: a function call with its thought signature
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [
                    {
                        "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                        "thoughtSignature": "CiQBcsjafQ==",
                    }
                ],
            },
            "finishReason": "STOP",
        }
    ],
    "modelVersion": GEMINI,
    "responseId": "resp-gemini-01",
    "usageMetadata": {"promptTokenCount": 80},
}
# The tool's result, as the app sends it back: without it the call is never served (no call
# goes to a model without its result).
RESULT = {
    "role": "user",
    "parts": [{"functionResponse": {"name": "get_weather", "response": {"output": "sunny, 21°C"}}}],
}
ANSWER = {"role": "model", "model": GEMINI, "parts": [{"text": "It is sunny and 21°C in Paris."}]}
# Each format for a model of its provider, and Gemini's format for another Gemini
TARGETS = [
    ("gemini", GEMINI),
    ("chat_completions", "gpt-4o"),
    ("anthropic", "claude-sonnet-4-5"),
    ("responses", "gpt-5"),
    ("gemini", "gemini-2.5-flash"),
]


def main() -> None:
    contexts = round_trip("gemini", [QUESTION, CALL, RESULT, ANSWER], TARGETS)
    call = contexts["gemini", GEMINI].contents[1]["parts"][0]
    print(f"back to {GEMINI}: the call with its signature: {call['thoughtSignature']}")


if __name__ == "__main__":
    main()
