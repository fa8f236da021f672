"""Pydantic AI on convlog, offline: a ``ConvlogHistory`` is the agent's ``message_history`` (where
an app keeps a plain list by default), so each run is sent the conversation's context from
convlog — windowed, summarised, within the budget, tool calls never split from their returns.

The model is Pydantic AI's own ``FunctionModel`` (a local function: no network, no key); give
the ``Agent`` a real model (``"anthropic:claude-sonnet-4-5"`` with ``ANTHROPIC_API_KEY``, and the
same model string to the history) and the rest stays. Needs ``pip install -e '.[pydantic-ai]'``
and a running ``convlog serve``:

    CONVLOG_URL=http://127.0.0.1:8080 CONVLOG_TOKEN=... python examples/python/pydantic_ai_history.py
"""

from __future__ import annotations

import uuid

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from convlog.client import ConvlogClient
from convlog.integrations.pydantic_ai import ConvlogHistory


def local_model(messages: list[ModelMessage], _info: AgentInfo) -> ModelResponse:
    """Stands in for the LLM: calls the tool for a weather question, answers from its return,
    and answers a follow-up from the history it was sent."""
    last = messages[-1].parts[-1]
    if isinstance(last, ToolReturnPart):
        return ModelResponse(parts=[TextPart(f"It is {last.content}.")])
    asked = [p.content for m in messages for p in m.parts if isinstance(p, UserPromptPart)]
    if "weather" in str(asked[-1]):
        return ModelResponse(parts=[ToolCallPart("get_weather", {"city": "Paris"}, tool_call_id="call_1")])
    return ModelResponse(parts=[TextPart(f"Before this you asked: {asked[0]!r}")])


agent = Agent(FunctionModel(local_model), system_prompt="Be brief.")


@agent.tool_plain
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny, 21°C in {city}"


def main() -> None:
    with ConvlogClient() as client:  # CONVLOG_URL and CONVLOG_TOKEN; closed at the end of the block
        history = ConvlogHistory(
            f"pydantic-ai-{uuid.uuid4().hex[:8]}", user_id="u1", client=client, model="gpt-4o", budget_tokens=8000
        )
        print(f"convlog at {client.base_url}: conversation {history.conversation_id}")
        for question in ("What's the weather in Paris?", "What did I ask before?"):
            result = agent.run_sync(question, message_history=history.load())
            history.save(result.new_messages())  # each message stored once, even if saved again
            print(f"user: {question}")
            print(f"assistant: {result.output}")
        loaded = history.load()
        parts = [type(p).__name__ for m in loaded for p in m.parts]
        print(f"the next history: {len(loaded)} messages ({', '.join(parts)})")


if __name__ == "__main__":
    main()
