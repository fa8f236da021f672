"""``ConvlogChatMessageHistory`` against a real ``convlog serve``: what langchain-core's own tests
check of a chat history (add_message / add_messages / the async interface / clear), tool calls
and their results kept whole, one atomic and idempotent append per ``add_messages``, a
multi-turn tool-using app through ``RunnableWithMessageHistory`` with langchain-core's fake
chat models, the same app switched from ``InMemoryChatMessageHistory`` by one line, and the
example of docs/adapters.md."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel, GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from convlog.client import AsyncConvlogClient, ConvlogClient, RejectedEventError
from convlog.integrations.langchain import ConvlogChatMessageHistory
from tests.integrations.readme import readme_example
from tests.live_server import TOKEN
from tests.test_client_live import _conversation

pytestmark = [
    pytest.mark.postgres,
    # LangChain deprecates its own chat-history API for LangGraph (1.3.3 / 1.6.4, removal in 2.0):
    # the warning is LangChain's about itself, not about this adapter.
    pytest.mark.filterwarnings("ignore::langchain_core._api.deprecation.LangChainDeprecationWarning"),
]


def _plain(messages: list[BaseMessage]) -> list[tuple[Any, ...]]:
    """What a model is sent of each message (ids and run metadata aside)."""
    out: list[tuple[Any, ...]] = []
    for m in messages:
        calls = [(c["id"], c["name"], c["args"]) for c in m.tool_calls] if isinstance(m, AIMessage) else []
        out.append((m.type, m.content, calls, getattr(m, "tool_call_id", None)))
    return out


def _history(client: ConvlogClient, session: str | None = None, **kw: Any) -> ConvlogChatMessageHistory:
    return ConvlogChatMessageHistory(session or _conversation(), client=client, user_id="lc", **kw)


# -- what langchain-core's tests check of BaseChatMessageHistory / InMemoryChatMessageHistory --


def test_add_message_one_at_a_time_and_in_bulk(convlog_client: ConvlogClient) -> None:
    history = _history(convlog_client)
    assert history.messages == []
    history.add_message(HumanMessage(content="Hello"))
    assert _plain(history.messages) == _plain([HumanMessage("Hello")])
    history.add_message(HumanMessage(content="World"))
    history.add_messages([HumanMessage(content="Hello"), HumanMessage(content="World")])
    assert _plain(history.messages) == _plain([HumanMessage("Hello"), HumanMessage("World")] * 2)
    history.add_user_message("user says")
    history.add_ai_message("ai says")
    assert [(m.type, m.content) for m in history.messages[-2:]] == [("human", "user says"), ("ai", "ai says")]
    assert str(history).endswith("Human: user says\nAI: ai says")


def test_clear_empties_the_history_and_a_new_object_reads_the_same_conversation(convlog_client: ConvlogClient) -> None:
    session = _conversation()
    history = _history(convlog_client, session)
    history.clear()  # nothing stored yet: nothing to clear
    history.add_messages([SystemMessage("Be brief."), HumanMessage("Hi"), AIMessage("Hello")])
    again = _history(convlog_client, session)
    assert _plain(again.messages) == _plain([SystemMessage("Be brief."), HumanMessage("Hi"), AIMessage("Hello")])
    again.clear()
    # convlog's new chat: the window restarts, the conversation's system prompt stays.
    assert _plain(history.messages) == _plain([SystemMessage("Be brief.")])
    history.add_messages([HumanMessage("after")])
    assert _plain(history.messages) == _plain([SystemMessage("Be brief."), HumanMessage("after")])
    events = [e.event_type for e in convlog_client.events("lc", session)]
    assert events == ["MessageAppended"] * 3 + ["ConversationCleared", "MessageAppended"]  # the audit keeps all


async def test_the_async_interface(served: str) -> None:
    async with AsyncConvlogClient(served, token=TOKEN) as aclient:
        history = ConvlogChatMessageHistory(_conversation(), async_client=aclient, user_id="lc")
        await history.aadd_messages([HumanMessage(content="Hello"), HumanMessage(content="World")])
        assert _plain(await history.aget_messages()) == _plain([HumanMessage("Hello"), HumanMessage("World")])
        await history.aadd_messages([HumanMessage(content="!")])
        assert _plain(await history.aget_messages()) == _plain(
            [HumanMessage("Hello"), HumanMessage("World"), HumanMessage("!")]
        )
        await history.aclear()
        assert await history.aget_messages() == []
        with pytest.raises(TypeError, match="async"):
            _ = history.messages  # no sync client was given


async def test_the_async_methods_fall_back_to_a_sync_client(convlog_client: ConvlogClient) -> None:
    history = _history(convlog_client)
    await history.aadd_messages([HumanMessage("Hello")])
    assert _plain(await history.aget_messages()) == _plain([HumanMessage("Hello")])
    await history.aclear()
    assert await history.aget_messages() == []


# -- tool calls, reasoning, atomicity, idempotency ------------------------------------------------

TOOL_TURN: list[BaseMessage] = [
    HumanMessage("What is 2+3, and 4+5?"),
    AIMessage(
        "",
        tool_calls=[
            {"id": "call_a", "name": "add", "args": {"a": 2, "b": 3}},
            {"id": "call_b", "name": "add", "args": {"a": 4, "b": 5}},
        ],
        additional_kwargs={"reasoning_content": "Two sums: call the tool twice."},
    ),
    ToolMessage("5", tool_call_id="call_a"),
    ToolMessage("error: overflow", tool_call_id="call_b", status="error"),
    AIMessage("2+3 is 5; the second sum failed."),
]


def test_tool_calls_and_results_round_trip_with_the_reasoning(convlog_client: ConvlogClient) -> None:
    session = _conversation()
    history = _history(convlog_client, session)
    history.add_messages(TOOL_TURN)
    served_back = history.messages
    assert _plain(served_back) == _plain(TOOL_TURN)
    assert served_back[1].additional_kwargs == {"reasoning_content": "Two sums: call the tool twice."}
    assert [getattr(m, "status", None) for m in served_back] == [None, None, "success", "error", None]
    # Chat Completions has no error flag on a tool result: the status is in the event's metadata.
    bodies = [e.body for e in convlog_client.events("lc", session)]
    assert [b["metadata"].get("langchain.status") for b in bodies[2:4]] == ["success", "error"]
    # Reasoning served per policy: omitted when asked.
    assert _history(convlog_client, session, reasoning="omit").messages[1].additional_kwargs == {}


def test_images_names_and_text_beside_calls_round_trip(convlog_client: ConvlogClient) -> None:
    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "auto"}}
    turn: list[BaseMessage] = [
        HumanMessage([{"type": "text", "text": "What is this?"}, image], name="ada"),
        AIMessage("Let me look.", tool_calls=[{"id": "c1", "name": "vision", "args": {"detail": "high"}}]),
        ToolMessage([{"type": "text", "text": "a cat"}], tool_call_id="c1"),
        AIMessage("A cat."),
    ]
    history = _history(convlog_client)
    history.add_messages(turn)
    served_back = history.messages
    assert _plain(served_back[:2]) == _plain(turn[:2])
    assert served_back[0].name == "ada"
    assert _plain(served_back[2:]) == _plain([ToolMessage("a cat", tool_call_id="c1"), AIMessage("A cat.")])


def test_a_native_tool_result_with_is_error_is_an_error_status(convlog_client: ConvlogClient) -> None:
    session = _conversation()
    call = {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "timeout", "is_error": True}
    turn = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "model": "claude-sonnet-4-5", "content": [call]},
        {"role": "user", "content": [result]},
    ]
    last = convlog_client.append("lc", session, turn, format="anthropic")
    convlog_client.context("lc", session, model="gpt-4o", budget_tokens=1000, min_offset=last.offset)  # projected
    served_back = _history(convlog_client, session).messages[-1]
    assert isinstance(served_back, ToolMessage)
    assert (served_back.tool_call_id, served_back.content, served_back.status) == ("toolu_1", "timeout", "error")


def test_reasoning_content_blocks_are_kept_as_reasoning(convlog_client: ConvlogClient) -> None:
    history = _history(convlog_client, reasoning="all")
    history.add_messages(
        [
            HumanMessage("Hi"),
            AIMessage([{"type": "reasoning", "reasoning": "greet back"}, {"type": "text", "text": "Hello!"}]),
        ]
    )
    answer = history.messages[-1]
    assert (answer.content, answer.additional_kwargs) == ("Hello!", {"reasoning_content": "greet back"})


def test_one_add_messages_is_one_atomic_append(convlog_client: ConvlogClient) -> None:
    session = _conversation()
    history = _history(convlog_client, session)
    with pytest.raises(RejectedEventError):
        history.add_messages([HumanMessage("kept?"), ChatMessage("beep", role="robot"), AIMessage("no")])
    assert history.messages == []  # refused whole: nothing of the list was stored
    history.add_messages(TOOL_TURN)
    assert len(convlog_client.events("lc", session)) == len(TOOL_TURN)


def test_the_same_messages_added_again_are_stored_once(convlog_client: ConvlogClient) -> None:
    session = _conversation()
    history = _history(convlog_client, session)
    turn = [HumanMessage("once", id="h-1"), AIMessage("only once", id="a-1")]
    history.add_messages(turn)
    _history(convlog_client, session).add_messages(turn)  # a retry by the app after an unknown outcome
    assert _plain(history.messages) == _plain(turn)
    assert len(convlog_client.events("lc", session)) == 2


def test_an_interrupted_tool_call_is_served_only_once_answered(convlog_client: ConvlogClient) -> None:
    session = _conversation()
    history = _history(convlog_client, session)
    asked = [HumanMessage("Weather?"), AIMessage("", tool_calls=[{"id": "w1", "name": "weather", "args": {}}])]
    history.add_messages(asked)  # the app stopped before the tool answered
    assert _plain(history.messages) == _plain(asked[:1])  # never a call without its result
    history.add_messages([ToolMessage("sunny", tool_call_id="w1"), AIMessage("Sunny.")])
    assert _plain(history.messages) == _plain([*asked, ToolMessage("sunny", tool_call_id="w1"), AIMessage("Sunny.")])
    history.add_messages([ToolMessage("stray", tool_call_id="nobody")])
    assert _plain(history.messages)[-1] == _plain([AIMessage("Sunny.")])[0]  # never a result without its call


def test_a_tight_budget_never_splits_a_call_from_its_results(convlog_client: ConvlogClient) -> None:
    session = _conversation()
    history = _history(convlog_client, session, budget_tokens=260)
    for i in range(12):
        history.add_messages(
            [
                HumanMessage(f"turn {i}: look up item {i} please, with some words to cost tokens"),
                AIMessage("", tool_calls=[{"id": f"c{i}", "name": "lookup", "args": {"item": i}}]),
                ToolMessage(f"item {i} is a widget of some considerable length and description", tool_call_id=f"c{i}"),
                AIMessage(f"Item {i} is a widget."),
            ]
        )
    served_back = history.messages
    assert 0 < len(served_back) < 48  # the window moved
    open_calls: set[str] = set()
    for m in served_back:
        if isinstance(m, AIMessage):
            assert not open_calls
            open_calls = {c["id"] for c in m.tool_calls if c["id"]}
        elif isinstance(m, ToolMessage):
            assert m.tool_call_id in open_calls  # never a result without its call
            open_calls.discard(m.tool_call_id)
    assert not open_calls  # never a call without its result
    assert isinstance(served_back[0], HumanMessage | SystemMessage)


# -- a tool-using app through RunnableWithMessageHistory -----------------------------------------

Factory = Callable[[str], BaseChatMessageHistory]


def _tool_app(get_history: Factory, turns: int) -> tuple[list[str], list[list[tuple[Any, ...]]]]:
    """A small agent: the fake model asks for the ``add`` tool, gets its result, answers; each
    turn's messages (question, call, result, answer) saved by RunnableWithMessageHistory in one
    ``add_messages``. Returns the answers and what the model was sent at each call."""
    script: list[BaseMessage] = []
    for t in range(turns):
        script.append(AIMessage("", tool_calls=[{"id": f"call_{t}", "name": "add", "args": {"a": t, "b": 1}}]))
        script.append(AIMessage(f"{t} + 1 = {t + 1}"))
    model = GenericFakeChatModel(messages=iter(script))
    seen: list[list[tuple[Any, ...]]] = []

    def agent(inputs: dict[str, Any]) -> list[BaseMessage]:
        new: list[BaseMessage] = [HumanMessage(inputs["question"])]
        while True:
            sent = [SystemMessage("You add numbers."), *inputs["history"], *new]
            seen.append(_plain(sent))
            reply = model.invoke(sent)
            new.append(reply)
            if not isinstance(reply, AIMessage) or not reply.tool_calls:
                return new[1:]
            new.extend(
                ToolMessage(str(c["args"]["a"] + c["args"]["b"]), tool_call_id=c["id"]) for c in reply.tool_calls
            )

    app = RunnableWithMessageHistory(
        RunnableLambda(agent), get_history, input_messages_key="question", history_messages_key="history"
    )
    answers = []
    for t in range(turns):
        out = app.invoke({"question": f"What is {t} + 1?"}, {"configurable": {"session_id": "s"}})
        answers.append(out[-1].content)
    return answers, seen


def test_a_tool_using_app_runs_several_turns_through_convlog(convlog_client: ConvlogClient) -> None:
    session = _conversation()
    answers, seen = _tool_app(lambda _: _history(convlog_client, session), turns=5)
    assert answers == [f"{t} + 1 = {t + 1}" for t in range(5)]
    # The last call saw every earlier turn whole: question, call, result, answer.
    assert seen[-1][1:5] == [
        ("human", "What is 0 + 1?", [], None),
        ("ai", "", [("call_0", "add", {"a": 0, "b": 1})], None),
        ("tool", "1", [], "call_0"),
        ("ai", "0 + 1 = 1", [], None),
    ]
    assert len(seen[-1]) == 1 + 4 * 4 + 3
    assert len(convlog_client.events("lc", session)) == 5 * 4


async def test_the_app_runs_async_with_the_async_client(served: str) -> None:
    model = FakeMessagesListChatModel(responses=[AIMessage("one"), AIMessage("two"), AIMessage("three")])
    session = _conversation()
    async with AsyncConvlogClient(served, token=TOKEN) as aclient:

        def history(_: str) -> ConvlogChatMessageHistory:
            return ConvlogChatMessageHistory(session, async_client=aclient, user_id="lc")

        app = RunnableWithMessageHistory(model, history)
        for question in ("a", "b", "c"):
            await app.ainvoke([HumanMessage(question)], {"configurable": {"session_id": session}})
        assert _plain(await history(session).aget_messages()) == _plain(
            [
                HumanMessage("a"),
                AIMessage("one"),
                HumanMessage("b"),
                AIMessage("two"),
                HumanMessage("c"),
                AIMessage("three"),
            ]
        )


def test_the_same_app_switched_from_in_memory_to_convlog_by_one_line(convlog_client: ConvlogClient) -> None:
    store: dict[str, InMemoryChatMessageHistory] = {}
    in_memory = _tool_app(lambda sid: store.setdefault(sid, InMemoryChatMessageHistory()), turns=4)
    session = _conversation()
    convlog = _tool_app(lambda sid: ConvlogChatMessageHistory(session, client=convlog_client, user_id="lc"), turns=4)
    assert convlog == in_memory  # the same answers, the model sent the same messages at every call
    assert _plain(_history(convlog_client, session).messages) == _plain(store["s"].messages)


# -- the example of docs/adapters.md --------------------------------------------------------------------------

README_EXAMPLE = readme_example("LangChain")


def test_the_readme_example_runs(
    served: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("CONVLOG_URL", served)
    monkeypatch.setenv("CONVLOG_TOKEN", TOKEN)
    exec(README_EXAMPLE, {})  # noqa: S102 -- the README's own example
    assert capsys.readouterr().out == "You are Ada.\n[\"Hi, I'm Ada.\", 'Hi Ada!', 'Who am I?', 'You are Ada.']\n"


# -- the summary, as a SystemMessage ---------------------------------------------------------------


def test_the_summary_of_the_turns_that_left_the_window_is_a_system_message(summarising: str) -> None:
    with ConvlogClient(summarising, token=TOKEN) as convlog_client:
        session = _conversation()
        history = _history(convlog_client, session)
        for t in range(8):
            history.add_messages([HumanMessage(f"My favourite number is {t}."), AIMessage(f"Noted: {t}.")])
        deadline = time.monotonic() + 30
        while not (served_back := history.messages)[0].id:
            assert time.monotonic() < deadline, "no summary was served"
            time.sleep(0.2)
        recorded = {s.summary_id: s for s in convlog_client.summaries("lc", session)}
    summary, rest = served_back[0], served_back[1:]
    assert isinstance(summary, SystemMessage)
    assert str(summary.id).startswith("convlog-summary-")
    text = recorded[str(summary.id).removeprefix("convlog-summary-")].text  # the summary convlog recorded
    assert text
    assert str(summary.content).endswith(text)
    assert 2 <= len(rest) < 16  # the turns the summary covers left the window
    assert isinstance(rest[0], HumanMessage)
    assert _plain(rest[-2:]) == _plain([HumanMessage("My favourite number is 7."), AIMessage("Noted: 7.")])
