"""A tool-calling app on convlog, offline: the model asks for a tool, the app appends that call,
runs the tool, appends its result, and the next context holds the call with its result — convlog
never serves a call without its result, nor a result without its call.

The "model" is a local function (no provider, no key): put your provider's call where
``fake_model`` is called. Needs a running ``convlog serve``:

    CONVLOG_URL=http://127.0.0.1:8080 CONVLOG_TOKEN=... python examples/python/tool_calling.py
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from convlog.client import ConvlogClient

USER = "u1"
MODEL = "gpt-4o"


def get_weather(city: str) -> str:
    """The app's tool."""
    return f"sunny, 21°C in {city}"


def fake_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Stands in for the LLM call: a Chat Completions assistant message, a tool call for a new
    question, the answer once the tool's result is in the history."""
    last = messages[-1]
    if last["role"] == "tool":
        return {"role": "assistant", "content": f"It is {last['content']}."}
    call = {
        "id": f"call_{uuid.uuid4().hex[:8]}",
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
    }
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def main() -> None:
    conversation = f"tools-{uuid.uuid4().hex[:8]}"
    with ConvlogClient() as client:  # CONVLOG_URL and CONVLOG_TOKEN; closed at the end of the block
        print(f"convlog at {client.base_url}: conversation {conversation}")
        sent = client.append(USER, conversation, {"role": "user", "content": "What's the weather in Paris?"})
        while True:
            context = client.context(USER, conversation, model=MODEL, budget_tokens=4000, min_offset=sent.offset)
            reply = fake_model(context.messages)
            sent = client.append(USER, conversation, reply)
            if not reply.get("tool_calls"):
                print(f"assistant: {reply['content']}")
                break
            for call in reply["tool_calls"]:
                arguments = json.loads(call["function"]["arguments"])
                print(f"tool call: {call['function']['name']}({arguments})")
                result = get_weather(**arguments)
                tool_message = {"role": "tool", "tool_call_id": call["id"], "content": result}
                sent = client.append(USER, conversation, tool_message)
                print(f"tool result: {result}")
        after = client.context(USER, conversation, model=MODEL, budget_tokens=4000, min_offset=sent.offset)
        print(f"the next context: {' -> '.join(_kind(m) for m in after.messages)}")


def _kind(message: dict[str, Any]) -> str:
    return "assistant tool call" if message.get("tool_calls") else message["role"]


if __name__ == "__main__":
    main()
