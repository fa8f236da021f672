"""The OpenAI Agents SDK on convlog, offline: a ``Runner`` whose session is a ``ConvlogSession``
(where the SDK's default is ``SQLiteSession``), so the agent's history is the conversation's
context in convlog — windowed, summarised, never a tool call without its output.

The model is the SDK's own scripted test model (``agents.testing.ScriptedModel``: no network,
no key); give the ``Agent`` a real model (``model="gpt-4o"``, with ``OPENAI_API_KEY``) and the
rest stays. Needs ``pip install -e '.[agents]'`` and a running ``convlog serve``:

    CONVLOG_URL=http://127.0.0.1:8080 CONVLOG_TOKEN=... python examples/python/agents_session.py
"""

from __future__ import annotations

import asyncio
import uuid

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from convlog.client import AsyncConvlogClient
from convlog.integrations.agents import ConvlogSession


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny, 21°C in {city}"


def scripted_model() -> ScriptedModel:
    """What the model answers, call by call: a tool call, the answer from its output, then an
    answer to the follow-up question."""
    model = ScriptedModel()
    model.extend(
        [
            [function_call("get_weather", {"city": "Paris"}, call_id="call_1")],
            [assistant_message("It is sunny in Paris.", item_id="msg_1")],
            [assistant_message("You asked about Paris.", item_id="msg_2")],
        ]
    )
    return model


async def main() -> None:
    set_tracing_disabled(True)  # the SDK exports traces to OpenAI by default: nothing leaves this machine
    model = scripted_model()
    agent = Agent(name="Assistant", instructions="Reply very concisely.", tools=[get_weather], model=model)
    async with AsyncConvlogClient() as client:  # CONVLOG_URL and CONVLOG_TOKEN; closed at the end of the block
        # the one line that changes: the SDK default is an SQLiteSession of the same id
        session = ConvlogSession(
            f"agents-{uuid.uuid4().hex[:8]}", client=client, user_id="u1", model="gpt-4o", budget_tokens=16_000
        )
        print(f"convlog at {client.base_url}: session {session.session_id}")
        for question in ("What's the weather in Paris?", "Which city did I ask about?"):
            result = await Runner.run(agent, question, session=session)
            print(f"user: {question}")
            print(f"assistant: {result.final_output}")
        sent = model.last_call.input if model.last_call else []
        print(f"the model was sent {len(sent)} items the second time: the history from convlog")
        items = await session.get_items()
        print(f"stored: {', '.join(str(item.get('type') or item.get('role')) for item in items)}")


if __name__ == "__main__":
    asyncio.run(main())
