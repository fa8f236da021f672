"""The Agents SDK's own ``OpenAIConversationsSession`` on convlog's OpenAI Conversations API
(a live ``convlog serve``): nothing of the SDK changed but the client's ``base_url`` and key.
Its session behaviour holds (add, get with a limit, pop, clear), and a 10-turn ``Runner.run``
with a tool gives a scripted model the same inputs the SDK's ``SQLiteSession`` gives."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, OpenAIConversationsSession, Runner, SQLiteSession, Usage, function_tool
from agents.memory import Session
from openai import AsyncOpenAI
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from tests.live_server import TOKEN

pytestmark = pytest.mark.postgres


@pytest.fixture
async def async_openai_client(served: str) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=f"{served}/v1", api_key=TOKEN, max_retries=0) as client:
        yield client


def _user(text: str) -> Any:
    return {"role": "user", "content": text}


async def test_the_sdks_session_behaviour_holds(async_openai_client: AsyncOpenAI, served: str) -> None:
    session = OpenAIConversationsSession(openai_client=async_openai_client)
    assert await session.get_items() == []  # creates the conversation
    first = session.session_id
    assert first.startswith("conv_")
    await session.add_items([_user(f"question {i}") for i in range(25)])  # two requests: 20, then 5
    items = await session.get_items()
    assert [item["content"][0]["text"] for item in items] == [f"question {i}" for i in range(25)]  # type: ignore[index,typeddict-item]
    newest = await session.get_items(limit=3)
    assert newest == items[-3:]
    popped = await session.pop_item()
    assert popped == items[-1]
    assert await session.get_items() == items[:-1]
    await session.clear_session()  # convlog's erase of the conversation
    with pytest.raises(ValueError, match="not yet available"):
        _ = session.session_id
    assert await session.get_items() == []  # a new, empty conversation
    assert session.session_id != first
    retrieve = await async_openai_client.conversations.retrieve(session.session_id)
    assert retrieve.id == session.session_id


class ToolModel(Model):
    """Scripted: a user message gets a ``lookup`` call; a tool output gets the answer. Records
    every input it is sent (a deep copy, as sent)."""

    def __init__(self) -> None:
        self.inputs: list[list[dict[str, Any]]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],  # noqa: A002 - the SDK's signature
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        items = [_user(input)] if isinstance(input, str) else [dict(i) for i in input]
        self.inputs.append(copy.deepcopy(items))
        n = len(self.inputs)
        last = items[-1]
        if last.get("type") == "function_call_output":
            text = ResponseOutputText(text=f"It is {last['output']}.", type="output_text", annotations=[])
            answer = ResponseOutputMessage(
                id=f"msg_{n}", type="message", role="assistant", status="completed", content=[text]
            )
            return ModelResponse(output=[answer], usage=Usage(), response_id=None)
        city = str(last["content"][0]["text"] if isinstance(last["content"], list) else last["content"])
        call = ResponseFunctionToolCall(
            id=f"fc_{n}",
            call_id=f"call_{n}",
            name="lookup",
            type="function_call",
            arguments=json.dumps({"city": city}),
            status="completed",
        )
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("these runs are not streamed")


@function_tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


async def _ten_turns(session: Session) -> list[list[dict[str, Any]]]:
    model = ToolModel()
    agent = Agent(name="weather", model=model, tools=[lookup])
    for turn in range(10):
        result = await Runner.run(agent, f"city {turn}", session=session)
        assert result.final_output == f"It is sunny in city {turn}."
    return model.inputs


async def test_ten_runs_with_a_tool_give_the_model_what_sqlite_gives(async_openai_client: AsyncOpenAI) -> None:
    on_convlog = await _ten_turns(OpenAIConversationsSession(openai_client=async_openai_client))
    on_sqlite = await _ten_turns(SQLiteSession("sqlite"))
    assert len(on_convlog) == len(on_sqlite) == 20
    for i, (a, b) in enumerate(zip(on_convlog, on_sqlite, strict=True)):
        assert [_as_listed(x) for x in a] == [_as_listed(y) for y in b], i


def _as_listed(item: dict[str, Any]) -> dict[str, Any]:
    """An item as a Conversations API (OpenAI's and convlog's) lists it, less its ``id``: the SDK
    strips the ids of messages, calls and outputs before it saves them there
    (``_sanitize_openai_conversation_item``) and the API gives its own. A message is typed, its
    string content one text part — what the Responses API reads alike."""
    item = {k: v for k, v in item.items() if k != "id"}
    if "role" not in item:
        return item
    content = item["content"]
    if isinstance(content, str):
        part = {"type": "input_text", "text": content}
        if item["role"] == "assistant":
            part = {"type": "output_text", "text": content, "annotations": []}
        content = [part]
    return {"type": "message", **item, "content": content}


async def test_the_switch_of_the_docs_runs_as_written(served: str) -> None:
    page = (Path(__file__).parents[2] / "docs" / "openai-conversations.md").read_text()
    found = re.search(r"## The switch\n.*?```python\n(.*?)```", page, re.S)
    assert found is not None
    code = found.group(1).replace("http://127.0.0.1:8080", served).replace("<a convlog token>", TOKEN)
    assert len(code.strip().splitlines()) == 5
    scope: dict[str, Any] = {}
    exec(code, scope)  # noqa: S102 - the page's own example
    session, agent = scope["session"], Agent(name="weather", model=ToolModel(), tools=[lookup])
    assert (await Runner.run(agent, "Paris", session=session)).final_output == "It is sunny in Paris."
    assert [item.get("type") for item in await session.get_items()] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    await scope["convlog"].close()
