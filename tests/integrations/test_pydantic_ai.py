"""convlog as a Pydantic AI agent's message history, against a real ``convlog serve``: agents
with tools on scripted models (``FunctionModel``, ``TestModel``; no network) for several turns,
the history loaded as ``message_history`` and saved from ``new_messages()`` every turn."""

from __future__ import annotations

import asyncio
import inspect
import re
import time
import tomllib
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    AudioUrl,
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.anthropic import AnthropicModel  # the anthropic SDK is in the dev extra
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_core import to_jsonable_python

from convlog.client import AsyncConvlogClient, ConvlogClient
from convlog.integrations.pydantic_ai import ConvlogHistory, format_for
from events.errors import InvalidEventError
from tests.integrations.readme import readme_example
from tests.live_server import TOKEN

pytestmark = pytest.mark.postgres

_counter = iter(range(1_000_000))


@pytest.fixture(autouse=True)
def _close_the_loop_run_sync_leaves(request: pytest.FixtureRequest) -> Iterator[None]:
    """``Agent.run_sync`` keeps the event loop it made set as the thread's current loop (to reuse
    it); close it after a sync test, or its sockets are reported unclosed in a later test."""
    yield
    if inspect.iscoroutinefunction(request.function):
        return
    policy = asyncio.get_event_loop_policy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = policy.get_event_loop()
        except RuntimeError:  # none left (asyncio.run unset it)
            return
    if not loop.is_running():
        loop.close()
        policy.set_event_loop(None)


@pytest.fixture
def conversation() -> str:
    return f"pai-{uuid.uuid4().hex[:10]}"


def weather_agent(model_name: str = "function:weather", thinking: bool = False) -> tuple[Agent[None, str], list[Any]]:
    """An agent whose scripted model asks the ``weather`` tool for the city in the question,
    then answers from the tool's return; ``seen`` records every request's messages."""
    seen: list[list[ModelMessage]] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse([TextPart(f"It is {returns[0].content}.")])
        # The newest prompt (a history ending in a request gets the new prompt in that request).
        prompt = [p for p in last.parts if isinstance(p, UserPromptPart)][-1]
        city = str(prompt.content).rsplit(" ", 1)[-1].rstrip("?")
        parts: list[Any] = []
        if thinking:
            parts.append(ThinkingPart(f"look up {city}", signature=f"sig-{city}", provider_name="anthropic"))
        parts.append(ToolCallPart("weather", {"city": city}, tool_call_id=f"call_{next(_counter)}"))
        return ModelResponse(parts, provider_name="anthropic" if thinking else None)

    agent: Agent[None, str] = Agent(FunctionModel(script, model_name=model_name), system_prompt="Be brief.")

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"sunny in {city}"

    return agent, seen


def _pairs_whole(messages: list[ModelMessage]) -> None:
    """Every tool call answered by the next request, every return answering a call before it."""
    open_calls: dict[str, str] = {}
    for m in messages:
        for p in m.parts:
            if isinstance(p, ToolCallPart):
                open_calls[p.tool_call_id] = p.tool_name
            elif isinstance(p, ToolReturnPart):
                assert open_calls.pop(p.tool_call_id) == p.tool_name
    assert not open_calls


def _stored(client: ConvlogClient, conversation: str, history: ConvlogHistory) -> int:
    """How many messages the audit transcript holds, once the history's saves are readable."""
    history.load()
    return len(client.messages("u1", conversation).messages)


def _round_trip(messages: list[ModelMessage]) -> None:
    """Stored and loaded the two ways Pydantic AI's docs do (JSON, and JSON-able Python)."""
    # Compared as JSON: validating turns a BinaryContent image into the equal BinaryImage.
    dumped = ModelMessagesTypeAdapter.dump_json(messages)
    assert ModelMessagesTypeAdapter.dump_json(ModelMessagesTypeAdapter.validate_json(dumped)) == dumped
    from_python = ModelMessagesTypeAdapter.validate_python(to_jsonable_python(messages))
    assert ModelMessagesTypeAdapter.dump_json(from_python) == dumped


def test_an_agent_with_tools_for_six_turns_through_convlog(convlog_client: ConvlogClient, conversation: str) -> None:
    agent, seen = weather_agent()
    cities = ["Paris", "Oslo", "Lima", "Rome", "Kyiv", "Quito"]
    offset = None
    for turn, city in enumerate(cities):
        # A new history each turn, as a web app makes one per request, carrying the offset over.
        history = ConvlogHistory(
            conversation, user_id="u1", client=convlog_client, budget_tokens=4000, min_offset=offset
        )
        loaded = history.load()
        _round_trip(loaded)
        result = agent.run_sync(f"Weather in {city}?", message_history=loaded)
        assert result.output == f"It is sunny in {city}."
        history.save(result.new_messages())
        offset = history.offset
        # The model saw every earlier turn whole: the prompt once, each call with its return.
        first_request = seen[-2]
        prompts = [p.content for m in first_request for p in m.parts if isinstance(p, UserPromptPart)]
        assert prompts == [f"Weather in {c}?" for c in cities[: turn + 1]]
        assert sum(isinstance(p, SystemPromptPart) for m in first_request for p in m.parts) == 1
        _pairs_whole(first_request[:-1])
    final = ConvlogHistory(conversation, user_id="u1", client=convlog_client, min_offset=offset).load()
    _round_trip(final)
    _pairs_whole(final)
    assert [type(m).__name__ for m in final] == ["ModelRequest", "ModelResponse", "ModelRequest", "ModelResponse"] * 6
    assert final[-1].parts == [TextPart("It is sunny in Quito.")]
    returns = [p for m in final for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [(r.tool_name, r.content) for r in returns] == [("weather", f"sunny in {c}") for c in cities]


def test_what_pydantic_ais_docs_promise_of_a_message_history(convlog_client: ConvlogClient, conversation: str) -> None:
    """docs/message-history.md: a non-empty history gets no new system prompt, ``all_messages()``
    is the history then ``new_messages()``, and messages from one model continue on another."""
    agent, seen = weather_agent()
    history = ConvlogHistory(conversation, user_id="u1", client=convlog_client)
    first = agent.run_sync("Weather in Paris?", message_history=history.load())
    assert isinstance(first.new_messages()[0].parts[0], SystemPromptPart)  # empty history: the agent's prompt
    history.save(first.new_messages())
    loaded = history.load()
    second = agent.run_sync("Weather in Oslo?", message_history=loaded)
    assert second.all_messages()[: len(loaded)] == loaded
    assert second.all_messages()[len(loaded) :] == second.new_messages()
    assert not [p for m in second.new_messages() for p in m.parts if isinstance(p, SystemPromptPart)]
    assert seen[-2][: len(loaded)] == loaded  # the model got the history as loaded, then the question
    other = Agent(TestModel(), system_prompt="Ignored: the history has one.")
    third = other.run_sync("Summarise", message_history=loaded)
    history.save(third.new_messages())
    assert [p.content for m in history.load() for p in m.parts if isinstance(p, SystemPromptPart)] == ["Be brief."]


def test_a_small_budget_drops_the_oldest_turns_and_never_splits_a_call_from_its_return(
    convlog_client: ConvlogClient, conversation: str
) -> None:
    agent, _ = weather_agent()
    history = ConvlogHistory(conversation, user_id="u1", client=convlog_client, budget_tokens=4000)
    for city in ["Paris", "Oslo", "Lima", "Rome", "Kyiv", "Quito", "Bern", "Baku"]:
        history.save(agent.run_sync(f"Weather in {city}?", message_history=history.load()).new_messages())
    small = ConvlogHistory(
        conversation, user_id="u1", client=convlog_client, budget_tokens=160, min_offset=history.offset
    )
    loaded = small.load()
    assert small.last_context is not None
    assert small.last_context.dropped_turns > 0
    assert small.last_context.token_count <= 160
    _pairs_whole(loaded)
    first = loaded[0]
    assert isinstance(first, ModelRequest)
    assert isinstance(first.parts[0], SystemPromptPart)
    assert any(isinstance(p, UserPromptPart) for p in first.parts)
    assert loaded[-1].parts == [TextPart("It is sunny in Baku.")]


def test_turns_that_left_the_window_come_back_as_the_summary_a_system_prompt_part(
    summarising: str, conversation: str
) -> None:
    agent, seen = weather_agent()
    cities = ["Paris", "Oslo", "Lima", "Rome", "Kyiv", "Quito"]
    with ConvlogClient(summarising, token=TOKEN) as convlog_client:
        history = ConvlogHistory(conversation, user_id="u1", client=convlog_client)
        for city in cities:
            history.save(agent.run_sync(f"Weather in {city}?", message_history=history.load()).new_messages())
        deadline = time.monotonic() + 30
        while True:
            loaded = history.load()
            assert history.last_context is not None
            if history.last_context.summary is not None:
                break
            assert time.monotonic() < deadline, "no summary within 30 s"
            time.sleep(0.2)
        summary = history.last_context.summary.text
        first = loaded[0]
        assert isinstance(first, ModelRequest)
        system = [p.content for p in first.parts if isinstance(p, SystemPromptPart)]
        assert system[0] == "Be brief."
        assert len(system) == 2
        assert summary in system[1]
        prompts = [p.content for m in loaded for p in m.parts if isinstance(p, UserPromptPart)]
        assert prompts == [f"Weather in {c}?" for c in cities[-len(prompts) :]]
        assert len(prompts) < len(cities)
        _pairs_whole(loaded)
        _round_trip(loaded)
        # The agent runs on it: its model gets the summary as a system prompt, the window whole.
        result = agent.run_sync("Weather in Bern?", message_history=loaded)
        assert result.output == "It is sunny in Bern."
        sent = seen[-2]
        assert system[1] in [p.content for m in sent for p in m.parts if isinstance(p, SystemPromptPart)]


def test_a_tool_retry_is_history_the_model_reads_back(convlog_client: ConvlogClient, conversation: str) -> None:
    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns and returns[0].outcome == "success":
            return ModelResponse([TextPart("Booked.")])
        day = "monday" if returns else "someday"
        return ModelResponse([ToolCallPart("book", {"day": day}, tool_call_id=f"call_{next(_counter)}")])

    agent = Agent(FunctionModel(script))

    @agent.tool_plain
    def book(day: str) -> str:
        if day == "someday":
            raise ModelRetry("name a weekday")
        return f"booked for {day}"

    history = ConvlogHistory(conversation, user_id="u1", client=convlog_client)
    result = agent.run_sync("Book me in", message_history=history.load())
    assert result.output == "Booked."
    history.save(result.new_messages())
    (retried,) = [p for m in result.new_messages() for p in m.parts if isinstance(p, ToolReturnPart) and p.retry]
    for model, outcome in [("claude-sonnet-4-5", "failed"), ("gpt-4o", "success")]:
        loaded = history.load(model=model)
        _pairs_whole(loaded)
        _round_trip(loaded)
        returns = [p for m in loaded for p in m.parts if isinstance(p, ToolReturnPart)]
        assert [(r.tool_name, r.outcome) for r in returns] == [("book", outcome), ("book", "success")]
        # What each model reads of the failed call is what it read when it was made.
        assert returns[0].model_response_str() == retried.model_response_str()
        assert returns[0].model_response_str(wrap_if_error=False) == (
            "name a weekday" if outcome == "failed" else retried.model_response_str()
        )
        assert returns[1].content == "booked for monday"


def test_saving_the_same_messages_twice_stores_them_once(convlog_client: ConvlogClient, conversation: str) -> None:
    agent, _ = weather_agent()
    history = ConvlogHistory(conversation, user_id="u1", client=convlog_client)
    first = agent.run_sync("Weather in Paris?", message_history=history.load())
    history.save(first.new_messages())
    stored = _stored(convlog_client, conversation, history)
    history.save(first.new_messages())
    history.save(ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(first.new_messages())))
    assert _stored(convlog_client, conversation, history) == stored == 5  # system, user, call, return, answer
    # all_messages() holds what load() gave: those are not stored again either.
    second = agent.run_sync("Weather in Oslo?", message_history=history.load())
    history.save(second.all_messages())
    assert _stored(convlog_client, conversation, history) == stored + 4
    # The same words asked again later are a new message.
    third = agent.run_sync("Weather in Paris?", message_history=history.load())
    history.save(third.new_messages())
    assert _stored(convlog_client, conversation, history) == stored + 8


def test_signed_anthropic_thinking_comes_back_for_the_model_that_wrote_it_only(
    convlog_client: ConvlogClient, conversation: str
) -> None:
    agent, _ = weather_agent(model_name="claude-sonnet-4-5", thinking=True)
    history = ConvlogHistory(conversation, user_id="u1", client=convlog_client, model="anthropic:claude-sonnet-4-5")
    for city in ["Paris", "Oslo"]:
        history.save(agent.run_sync(f"Weather in {city}?", message_history=history.load()).new_messages())

    same = history.load()
    _round_trip(same)
    thinking = [(m, p) for m in same for p in m.parts if isinstance(p, ThinkingPart)]
    assert [(p.content, p.signature, p.provider_name) for _, p in thinking] == [
        ("look up Paris", "sig-Paris", "anthropic"),
        ("look up Oslo", "sig-Oslo", "anthropic"),
    ]
    assert all(isinstance(m, ModelResponse) and m.provider_name == "anthropic" for m, _ in thinking)
    # Thinking is in the Anthropic response before its tool call, as Claude wrote it.
    response = same[1]
    assert isinstance(response, ModelResponse)
    assert [type(p) for p in response.parts] == [ThinkingPart, ToolCallPart]

    for other in ["openai:gpt-4o", "claude-opus-4-1"]:  # another provider; another Claude model
        switched = history.load(model=other)
        assert not [p for m in switched for p in m.parts if isinstance(p, ThinkingPart)]
        _pairs_whole(switched)
        assert history.last_context is not None
        assert any("reasoning" in d.what or "thinking" in d.what for d in history.last_context.dropped)
        prompts = [p.content for m in switched for p in m.parts if isinstance(p, UserPromptPart)]
        assert prompts == ["Weather in Paris?", "Weather in Oslo?"]


def test_loaded_anthropic_thinking_is_what_pydantic_ais_anthropic_model_sends_back(
    convlog_client: ConvlogClient, conversation: str
) -> None:
    agent, _ = weather_agent(model_name="claude-sonnet-4-5", thinking=True)
    history = ConvlogHistory(conversation, user_id="u1", client=convlog_client, model="anthropic:claude-sonnet-4-5")
    history.save(agent.run_sync("Weather in Paris?", message_history=history.load()).new_messages())
    claude = AnthropicModel("claude-sonnet-4-5", provider=AnthropicProvider(api_key="not-used"))
    assert format_for(claude) == ("anthropic", "claude-sonnet-4-5")
    response = history.load(model=claude)[1]
    assert isinstance(response, ModelResponse)
    thinking = response.parts[0]
    assert isinstance(thinking, ThinkingPart)
    assert claude.accepts_stateless_artifacts(response, thinking)


def test_openai_reasoning_items_come_back_for_the_model_that_wrote_them_only(
    convlog_client: ConvlogClient, conversation: str
) -> None:
    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if any(isinstance(p, ToolReturnPart) for p in last.parts):
            return ModelResponse(
                [TextPart("Done.", id=f"msg_{next(_counter)}", provider_name="openai")], provider_name="openai"
            )
        n = next(_counter)
        return ModelResponse(
            [
                ThinkingPart("plan", id=f"rs_{n}", signature=f"gAAAA-{n}", provider_name="openai"),
                ThinkingPart("more", id=f"rs_{n}", provider_name="openai"),
                ToolCallPart("lookup", {"q": "x"}, tool_call_id=f"call_{n}", id=f"fc_{n}", provider_name="openai"),
            ],
            provider_name="openai",
        )

    agent = Agent(FunctionModel(script, model_name="gpt-5"))

    @agent.tool_plain
    def lookup(q: str) -> str:
        return "found"

    history = ConvlogHistory(conversation, user_id="u1", client=convlog_client, model="openai:gpt-5")
    for question in ["First?", "Second?"]:
        result = agent.run_sync(question, message_history=history.load())
        history.save(result.new_messages())
    written = [p for m in result.new_messages() for p in m.parts if isinstance(p, ThinkingPart)]
    history.load()
    apis = {e.body.get("api") for e in convlog_client.events("u1", conversation) if e.body.get("role") == "assistant"}
    assert apis == {"responses"}  # stored as Response objects, reasoning items whole

    loaded = history.load()
    _round_trip(loaded)
    _pairs_whole(loaded)
    thinking = [p for m in loaded for p in m.parts if isinstance(p, ThinkingPart)]
    assert len(thinking) == 4
    assert [(p.content, p.id, p.signature, p.provider_name) for p in thinking[2:]] == [
        (p.content, p.id, p.signature, p.provider_name) for p in written
    ]
    for kind in (ToolCallPart, TextPart):  # the item ids (fc_…, msg_…) too
        ids = [p.id for m in loaded for p in m.parts if isinstance(p, kind)]
        assert ids == [p.id for m in result.all_messages() for p in m.parts if isinstance(p, kind)]
        assert all(ids)
    responses = OpenAIResponsesModel("gpt-5", provider=OpenAIProvider(api_key="not-used"))
    assert format_for(responses) == ("responses", "gpt-5")
    response = next(m for m in history.load(model=responses) if isinstance(m, ModelResponse))
    assert responses.accepts_stateless_artifacts(response, response.parts[0])

    for other in ["anthropic:claude-sonnet-4-5", "gpt-4o", "openai:gpt-4.1"]:  # another provider, API, model
        switched = history.load(model=other)
        assert not [p for m in switched for p in m.parts if isinstance(p, ThinkingPart)], other
        _pairs_whole(switched)
        assert [p.content for m in switched for p in m.parts if isinstance(p, UserPromptPart)] == ["First?", "Second?"]


def test_plain_thinking_is_kept_as_reasoning_and_history_has_no_provider_blobs(
    convlog_client: ConvlogClient, conversation: str
) -> None:
    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse([ThinkingPart("hmm"), TextPart("Hi!")])

    agent = Agent(FunctionModel(script, model_name="deepseek-chat"))
    history = ConvlogHistory(conversation, user_id="u1", client=convlog_client, model="deepseek-chat")
    history.save(agent.run_sync("Hello", message_history=history.load()).new_messages())
    loaded = history.load()
    (event,) = [e for e in convlog_client.events("u1", conversation) if e.body.get("role") == "assistant"]
    assert event.body["reasoning_content"] == "hmm"
    assert loaded[-1].parts == [TextPart("Hi!")]  # reasoning_content is served per reasoning=omit


async def test_a_run_interrupted_mid_tool_call_is_resumed_without_the_unanswered_call(
    convlog_client: ConvlogClient, conversation: str
) -> None:
    agent, _ = weather_agent()
    history = ConvlogHistory(
        conversation, user_id="u1", client=convlog_client
    )  # a sync client: aload runs it in a thread
    await history.asave((await agent.run("Weather in Paris?", message_history=await history.aload())).new_messages())
    # The app saved as the run went (agent.iter), and the process died while the tool ran.
    before = await history.aload()
    partial: list[ModelMessage] = []
    async with agent.iter("Weather in Oslo?", message_history=before) as run:
        async for node in run:
            if Agent.is_call_tools_node(node):
                partial = run.ctx.state.message_history[len(before) :]
                break
    assert isinstance(partial[-1].parts[-1], ToolCallPart)
    await history.asave(partial)
    loaded = await history.aload()
    _pairs_whole(loaded)  # the unanswered call is not served (convlog leaves unfinished calls out)
    assert [p.content for m in loaded for p in m.parts if isinstance(p, UserPromptPart)] == [
        "Weather in Paris?",
        "Weather in Oslo?",
    ]
    result = await agent.run("Weather in Oslo?", message_history=loaded)  # asked again
    assert result.output == "It is sunny in Oslo."
    await history.asave(result.new_messages())
    resumed = await history.aload()
    _pairs_whole(resumed)
    assert resumed[-1].parts == [TextPart("It is sunny in Oslo.")]


def test_hand_made_messages_images_an_empty_answer_and_a_part_convlog_cannot_store(
    convlog_client: ConvlogClient, conversation: str
) -> None:
    png = BinaryContent(b"\x89PNG\r\n\x1a\n-tiny", media_type="image/png")
    asked = ModelRequest([UserPromptPart(["What is on these?", ImageUrl("https://example.com/cat.png"), png])])
    empty = ModelResponse([TextPart("")], provider_name="anthropic", model_name="claude-sonnet-4-5")
    history = ConvlogHistory(conversation, user_id="u1", client=convlog_client, model="claude-sonnet-4-5")
    history.save([asked, empty])
    for model in ["claude-sonnet-4-5", "gpt-4o", "openai:gpt-5"]:
        loaded = history.load(model=model)
        _round_trip(loaded)
        (prompt,) = loaded[0].parts
        assert isinstance(prompt, UserPromptPart)
        assert prompt.content == ["What is on these?", ImageUrl("https://example.com/cat.png"), png], model
        # An answer with no text is nothing a model reads: served as nothing, or as an empty text.
        assert not [p for m in loaded[1:] for p in m.parts if not (isinstance(p, TextPart) and not p.content)]
        assert Agent(TestModel()).run_sync("Again?", message_history=loaded).output

    stored = _stored(convlog_client, conversation, history)
    audio = ModelRequest([UserPromptPart(["Listen", AudioUrl("https://example.com/a.mp3")])])
    with pytest.raises(InvalidEventError, match="AudioUrl"):
        history.save([ModelRequest([UserPromptPart("Before")]), audio])
    assert _stored(convlog_client, conversation, history) == stored  # nothing of the refused batch


async def test_the_async_twins(served: str, conversation: str) -> None:
    agent, _ = weather_agent()
    async with AsyncConvlogClient(served, token=TOKEN) as aclient:
        history = ConvlogHistory(conversation, user_id="u1", client=aclient)
        for city in ["Paris", "Oslo"]:
            result = await agent.run(f"Weather in {city}?", message_history=await history.aload())
            await history.asave(result.new_messages())
        loaded = await history.aload()
        with pytest.raises(TypeError):
            history.load()
    _pairs_whole(loaded)
    assert loaded[-1].parts == [TextPart("It is sunny in Oslo.")]
    assert len(loaded) == 8


def test_clear_starts_a_new_chat(convlog_client: ConvlogClient, conversation: str) -> None:
    agent, _ = weather_agent()
    history = ConvlogHistory(conversation, user_id="u1", client=convlog_client)
    history.save(agent.run_sync("Weather in Paris?", message_history=history.load()).new_messages())
    history.clear()
    # The system prompt stays (convlog keeps system prompts across a new chat); the turns are gone.
    (request,) = history.load()
    assert isinstance(request, ModelRequest)
    assert [type(p) for p in request.parts] == [SystemPromptPart]
    assert _stored(convlog_client, conversation, history) == 5  # the audit keeps them
    result = agent.run_sync("Weather in Oslo?", message_history=history.load())
    assert result.output == "It is sunny in Oslo."
    history.save(result.new_messages())
    assert [p.content for m in history.load() for p in m.parts if isinstance(p, UserPromptPart)] == ["Weather in Oslo?"]


# --- the one-line switch ----------------------------------------------------------------


def chat_app(questions: list[str], history: Any = None) -> tuple[list[str], list[ModelMessage]]:
    """A chat app as Pydantic AI's docs write it: its memory is the list of messages."""
    agent = Agent(TestModel(), system_prompt="Be brief.")

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"sunny in {city}"

    messages: list[ModelMessage] = [] if history is None else history  # the one line switched
    answers = []
    for question in questions:
        result = agent.run_sync(question, message_history=messages)
        messages.extend(result.new_messages())
        answers.append(result.output)
    return answers, list(messages)


def test_a_chat_app_switched_from_its_list_to_convlog_by_one_line_keeps_working(
    convlog_client: ConvlogClient, conversation: str
) -> None:
    questions = ["Weather in Paris?", "And Oslo?", "Thanks!"]
    answers, in_memory = chat_app(questions)
    history = ConvlogHistory(conversation, user_id="u1", client=convlog_client)
    answers_convlog, loaded = chat_app(questions, history)
    assert answers_convlog == answers
    assert any(isinstance(p, ToolReturnPart) for m in loaded for p in m.parts)  # TestModel called the tool
    _pairs_whole(loaded)
    assert _what_the_model_reads(loaded) == _what_the_model_reads(in_memory)
    assert _stored(convlog_client, conversation, history) == sum(len(m.parts) for m in in_memory)


def _what_the_model_reads(messages: list[ModelMessage]) -> list[tuple[str, ...]]:
    """The messages without what is not history (timestamps, run ids, usage)."""
    out: list[tuple[str, ...]] = []
    for m in messages:
        for p in m.parts:
            if isinstance(p, ToolCallPart):
                out.append(("call", p.tool_name, p.args_as_json_str(), p.tool_call_id))
            elif isinstance(p, ToolReturnPart):
                out.append(("return", p.tool_name, p.model_response_str(), p.tool_call_id))
            elif isinstance(p, SystemPromptPart | UserPromptPart | TextPart):
                out.append((type(p).__name__, str(p.content)))
    return out


README_EXAMPLE = readme_example("Pydantic AI")


def test_the_readme_example_runs(served: str, conversation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVLOG_URL", served)
    monkeypatch.setenv("CONVLOG_TOKEN", TOKEN)
    code = README_EXAMPLE.replace('"c-42"', repr(conversation))
    # Run as written but for the model: Claude itself would need the network and a key.
    code = code.replace('Agent("anthropic:claude-sonnet-4-5", system', "Agent(TestModel(), system")
    assert code.count("TestModel()") == 1
    namespace: dict[str, Any] = {"TestModel": TestModel}
    exec(code, namespace)  # noqa: S102 -- the docs' own example
    history = namespace["history"]
    loaded = history.load()
    assert [type(m) for m in loaded] == [ModelRequest, ModelResponse] * 2
    assert [p.content for m in loaded for p in m.parts if isinstance(p, UserPromptPart)] == [
        "Weather in Paris?",
        "And in Oslo?",
    ]
    history.close()


def test_the_extra_installs_what_the_example_with_a_real_model_needs() -> None:
    """``convlog[pydantic-ai]`` brings Pydantic AI's extra for the provider of the docs' example
    (``anthropic:`` models import the anthropic SDK, which the slim package leaves out)."""
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extra = [Requirement(r) for r in pyproject["project"]["optional-dependencies"]["pydantic-ai"]]
    provider = re.search(r'Agent\("(\w+):', README_EXAMPLE)
    assert provider is not None
    assert any(r.name == "pydantic-ai-slim" and provider.group(1) in r.extras for r in extra)
