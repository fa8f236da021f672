"""A plain chat app on convlog, offline: every turn appends the user's message, reads the context
to send (windowed, summarised, within the token budget) and appends the answer.

The "model" is a local function so that this runs without a provider or a key: put your
provider's call where ``fake_model`` is called. Needs a running ``convlog serve``:

    CONVLOG_URL=http://127.0.0.1:8080 CONVLOG_TOKEN=... python examples/python/chat_app.py
"""

from __future__ import annotations

import uuid
from typing import Any

from convlog.client import ConvlogClient

USER = "u1"
MODEL = "gpt-4o"  # counts the tokens of the context as this model would
QUESTIONS = ["Hi, I'm Ada.", "What is the capital of France?", "What is my name?"]


def fake_model(messages: list[dict[str, Any]]) -> str:
    """Stands in for the LLM call: it answers from the history it is sent, as a real one would."""
    question = messages[-1]["content"]
    said = " ".join(m["content"] for m in messages if m["role"] == "user")
    if "my name" in question:
        return "Ada." if "I'm Ada" in said else "I don't know."
    if "capital of France" in question:
        return "Paris."
    return "Hello!"


def main() -> None:
    conversation = f"chat-{uuid.uuid4().hex[:8]}"
    with ConvlogClient() as client:  # CONVLOG_URL and CONVLOG_TOKEN; closed at the end of the block
        print(f"convlog at {client.base_url}: conversation {conversation} of user {USER}")
        client.append(USER, conversation, {"role": "system", "content": "Be brief."})
        for question in QUESTIONS:
            asked = client.append(USER, conversation, {"role": "user", "content": question})
            # min_offset: wait until the message just appended is in the context (read-your-writes)
            context = client.context(USER, conversation, model=MODEL, budget_tokens=4000, min_offset=asked.offset)
            answer = fake_model(context.messages)
            answered = client.append(USER, conversation, {"role": "assistant", "content": answer})
            print(f"user: {question}")
            print(f"assistant: {answer} (sent {len(context.messages)} messages, {context.token_count} tokens)")
        after = client.context(USER, conversation, model=MODEL, budget_tokens=4000, min_offset=answered.offset)
        print(f"the next context: {', '.join(m['role'] for m in after.messages)}")


if __name__ == "__main__":
    main()
