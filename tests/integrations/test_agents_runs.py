"""Real ``agents.Runner`` runs through ``ConvlogSession`` with a scripted model (the SDK's
``Model`` interface, no network): 20 turns of reasoning and tool calls, one interrupted by the
tool raising, one cancelled mid-call, one waiting for an approval given later (resumed from
its RunState) and one whose approval never comes — and no input the model ever receives
breaks the Responses API's rules (no call without its output, no output without its call, no
reasoning item cut from its item); the SDK's SQLiteSession sends the very same inputs. Then
the one-line switch, and the example of docs/adapters.md."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, Runner, SQLiteSession, Usage, function_tool
from agents.memory import Session
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from convlog.client import AsyncConvlogClient
from convlog.integrations.agents import ConvlogSession
from events.formats.responses.rules import violations
from tests.integrations.agents_support import TOKEN, USER, new_id
from tests.integrations.readme import readme_example

pytestmark = pytest.mark.postgres


class WeatherModel(Model):
    """Scripted: a user message gets reasoning + a ``lookup`` call; a tool output gets
    reasoning + the answer. Records every input it is sent (a deep copy, as sent)."""

    def __init__(self) -> None:
        self.inputs: list[list[dict[str, Any]]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],  # noqa: A002 - the SDK's signature
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else [dict(i) for i in input]
        self.inputs.append(copy.deepcopy(items))
        n = len(self.inputs)
        reasoning = ResponseReasoningItem(
            id=f"rs_{n}",
            type="reasoning",
            encrypted_content=f"blob-{n}",
            summary=[Summary(text=f"thinking {n}", type="summary_text")],
        )
        last = items[-1]
        if last.get("type") == "function_call_output":
            text = f"It is {last['output']}."
            answer = ResponseOutputMessage(
                id=f"msg_{n}",
                type="message",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
            )
            return ModelResponse(output=[reasoning, answer], usage=Usage(), response_id=None)
        city = str(last.get("content"))
        call = ResponseFunctionToolCall(
            id=f"fc_{n}",
            call_id=f"call_{n}",
            name="lookup",
            type="function_call",
            arguments=json.dumps({"city": city}),
            status="completed",
        )
        return ModelResponse(output=[reasoning, call], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("these runs are not streamed")


class Weather:
    """The tool, and how its next call behaves: answer, raise, hang until cancelled, or wait
    for the user's approval (the SDK interrupts the run: ``result.interruptions``)."""

    def __init__(self) -> None:
        self.mode = "answer"
        self.started = asyncio.Event()

    def tool(self) -> Any:
        async def needs_approval(_context: Any, _arguments: dict[str, Any], _call_id: str) -> bool:
            return self.mode.startswith("approval")

        @function_tool(failure_error_function=None, needs_approval=needs_approval)  # a failure interrupts the run
        async def lookup(city: str) -> str:
            """The weather in a city."""
            self.started.set()
            if self.mode == "raise":
                raise RuntimeError("the weather service is down")
            if self.mode == "hang":
                await asyncio.Event().wait()
            return f"sunny in {city}"

        return lookup


# Turn -> how it goes: the tool raises (the run fails), the run is cancelled while the tool
# runs, the call waits for an approval given later (the run resumed from its state), or one
# never given (the app moves on to the next question).
INTERRUPTED: dict[int, str] = {4: "raise", 8: "hang", 12: "approval-given", 16: "approval-never-given"}


async def _twenty_turns(session: Session) -> WeatherModel:
    model, weather = WeatherModel(), Weather()
    agent = Agent(name="weather", model=model, tools=[weather.tool()])
    for turn in range(20):
        weather.mode = INTERRUPTED.get(turn, "answer")
        weather.started.clear()
        run = asyncio.create_task(Runner.run(agent, f"city {turn}", session=session))
        if weather.mode == "hang":
            await weather.started.wait()
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
        elif weather.mode == "raise":
            with pytest.raises(Exception, match="weather service is down"):
                await run
        elif weather.mode.startswith("approval"):
            result = await run
            assert result.interruptions
            assert result.final_output is None
            if weather.mode == "approval-given":
                state = result.to_state()
                state.approve(result.interruptions[0])
                resumed = await Runner.run(agent, state, session=session)
                assert resumed.final_output == f"It is sunny in city {turn}."
        else:
            result = await run
            assert result.final_output == f"It is sunny in city {turn}."
    return model


async def test_twenty_tool_turns_interrupted_and_resumed_never_send_an_orphan(
    async_convlog_client: AsyncConvlogClient,
) -> None:
    session = ConvlogSession(new_id(), client=async_convlog_client, user_id=USER, budget_tokens=100_000)
    model = await _twenty_turns(session)
    for sent in model.inputs:
        assert violations({"input": sent}) == [], sent
    final = model.inputs[-1]
    users = [i["content"] for i in final if i.get("role") == "user"]
    assert users == [f"city {t}" for t in range(20)]  # the interrupted questions stay in the history
    answered = {i["call_id"] for i in final if i.get("type") == "function_call_output"}
    assert len(answered) == 20 - 3  # every call answered in time is served with its output
    assert all(i["call_id"] in answered for i in final if i.get("type") == "function_call")
    reasoning = [i for i in final if i.get("type") == "reasoning"]
    assert len(reasoning) == 2 * 16 + 1  # kept between turns (the last answer's is not sent yet)
    assert {
        "id": "rs_1",
        "type": "reasoning",
        "encrypted_content": "blob-1",
        "summary": [{"type": "summary_text", "text": "thinking 1"}],
    }.items() <= final[1].items()


async def test_the_same_run_on_sqlite_sends_the_model_the_same_inputs(async_convlog_client: AsyncConvlogClient) -> None:
    """The drop-in is exact: through every interruption, the model is sent what the SDK's own
    session would send it (SDK 0.24 holds back an unanswered call itself; convlog would not
    serve one even if it were saved, see test_agents.py's pop tests)."""
    on_sqlite = await _twenty_turns(SQLiteSession(new_id()))
    on_convlog = await _twenty_turns(
        ConvlogSession(new_id(), client=async_convlog_client, user_id=USER, budget_tokens=100_000)
    )
    assert on_convlog.inputs == on_sqlite.inputs


async def chat_app(session: Session) -> tuple[list[str], WeatherModel]:
    """A small chat app with a tool; its history is whatever ``session`` keeps."""
    model, weather = WeatherModel(), Weather()
    agent = Agent(name="weather", model=model, tools=[weather.tool()])
    answers = [str((await Runner.run(agent, q, session=session)).final_output) for q in ("Paris", "Rome", "Oslo")]
    return answers, model


async def test_switching_from_sqlite_to_convlog_is_one_line(served: str) -> None:
    default_answers, default_model = await chat_app(SQLiteSession("chat-1"))
    async with AsyncConvlogClient(served, token=TOKEN) as convlog:
        answers, model = await chat_app(ConvlogSession(new_id("chat"), client=convlog, user_id=USER))
    assert answers == default_answers == ["It is sunny in Paris.", "It is sunny in Rome.", "It is sunny in Oslo."]
    assert model.inputs == default_model.inputs  # the model is sent the very same items


README_EXAMPLE = readme_example("OpenAI Agents SDK")


async def test_the_readme_example_runs(
    served: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example of docs/adapters.md with a real model, run as written but for a scripted model
    instead of OpenAI's (no network in tests): the service's address and token from the environment."""
    from agents.testing import ScriptedModel, assistant_message  # noqa: PLC0415

    assert "127.0.0.1" not in README_EXAMPLE
    monkeypatch.setenv("CONVLOG_URL", served)
    monkeypatch.setenv("CONVLOG_TOKEN", TOKEN)
    scripted = ScriptedModel()
    scripted.extend([[assistant_message("San Francisco")], [assistant_message("California")]])
    code = (
        README_EXAMPLE.replace(
            'instructions="Reply very concisely.")', 'instructions="Reply very concisely.", model=scripted)'
        )
        .replace("conversation-1", new_id("readme"))
        .replace("asyncio.run(main())", "")
    )
    namespace: dict[str, Any] = {"scripted": scripted, "__name__": "readme_example"}
    exec(compile(code, "docs/adapters.md", "exec"), namespace)  # noqa: S102 -- the docs' own code
    await namespace["main"]()
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["San Francisco", "California"]
    assert "What state is it in?" in lines[2]
    assert "What city" in str(scripted.calls[-1].input)
