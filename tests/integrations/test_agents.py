"""``ConvlogSession`` against a live ``convlog serve``: what the Agents SDK's own tests check of
its ``SQLiteSession`` (tests/memory/test_session.py and test_session_limit.py of
openai-agents-python, ported), then what convlog adds — idempotent appends, pops that keep the
audit and never split a call from its output, the instructions as the leading item."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import httpx
import pytest
from agents import Agent, RunConfig, Runner, SessionSettings, TResponseInputItem
from agents.testing import ScriptedModel, assistant_message

from convlog.client import (
    NO_RETRY,
    AsyncConvlogClient,
    ClientTimeoutError,
    NotFoundError,
    RejectedEventError,
    RejectedRequestError,
)
from convlog.integrations.agents import ConvlogSession
from tests.integrations.agents_support import TOKEN, USER, new_id, session_on

pytestmark = pytest.mark.postgres

Items = list[TResponseInputItem]


def _items(*pairs: tuple[str, str]) -> Items:
    return cast("Items", [{"role": role, "content": content} for role, content in pairs])


async def _run(agent: Agent[Any], input_data: Any, *, streamed: bool, **kwargs: Any) -> Any:
    if not streamed:
        return await Runner.run(agent, input_data, **kwargs)
    result = Runner.run_streamed(agent, input_data, **kwargs)
    async for _ in result.stream_events():
        pass
    return result


# --- the SDK's session tests, ported -----------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_session_memory_basic_functionality(async_convlog_client: AsyncConvlogClient, streamed: bool) -> None:
    session = session_on(async_convlog_client)
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    model.enqueue([assistant_message("San Francisco")])
    first = await _run(agent, "What city is the Golden Gate Bridge in?", streamed=streamed, session=session)
    assert first.final_output == "San Francisco"
    model.enqueue([assistant_message("California")])
    second = await _run(agent, "What state is it in?", streamed=streamed, session=session)
    assert second.final_output == "California"
    last_input = model.calls[-1].input
    assert [i.get("role") for i in last_input] == ["user", "assistant", "user"]
    assert last_input[0]["content"] == "What city is the Golden Gate Bridge in?"


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_different_sessions_keep_separate_histories(
    async_convlog_client: AsyncConvlogClient, streamed: bool
) -> None:
    model = ScriptedModel()
    agent = Agent(name="test", model=model)
    cats, dogs = session_on(async_convlog_client), session_on(async_convlog_client)
    model.enqueue([assistant_message("I like cats")])
    await _run(agent, "I like cats", streamed=streamed, session=cats)
    model.enqueue([assistant_message("I like dogs")])
    await _run(agent, "I like dogs", streamed=streamed, session=dogs)
    model.enqueue([assistant_message("Yes, you mentioned cats")])
    result = await _run(agent, "What did I say I like?", streamed=streamed, session=cats)
    assert result.final_output == "Yes, you mentioned cats"
    assert "dogs" not in str(model.calls[-1].input)
    assert "cats" in str(model.calls[-1].input)


async def test_add_get_and_clear(async_convlog_client: AsyncConvlogClient) -> None:
    session = session_on(async_convlog_client)
    items = _items(("user", "Hello"), ("assistant", "Hi there!"))
    await session.add_items(items)
    assert await session.get_items() == items
    await session.clear_session()
    assert await session.get_items() == []


async def test_pop_item_returns_the_newest_until_none(async_convlog_client: AsyncConvlogClient) -> None:
    session = session_on(async_convlog_client)
    assert await session.pop_item() is None
    await session.add_items(_items(("user", "Hello"), ("assistant", "Hi there!"), ("user", "How are you?")))
    assert len(await session.get_items()) == 3
    assert await session.pop_item() == {"role": "user", "content": "How are you?"}
    after = await session.get_items()
    assert len(after) == 2
    assert after[-1].get("content") == "Hi there!"
    assert await session.pop_item() == {"role": "assistant", "content": "Hi there!"}
    assert await session.pop_item() == {"role": "user", "content": "Hello"}
    assert await session.pop_item() is None
    assert await session.get_items() == []


async def test_pop_item_affects_only_its_session(async_convlog_client: AsyncConvlogClient) -> None:
    one, two = session_on(async_convlog_client), session_on(async_convlog_client)
    await one.add_items(_items(("user", "Session 1 message")))
    await two.add_items(_items(("user", "Session 2 message 1"), ("user", "Session 2 message 2")))
    popped = await two.pop_item()
    assert popped is not None
    assert popped.get("content") == "Session 2 message 2"
    assert [i.get("content") for i in await one.get_items()] == ["Session 1 message"]
    assert [i.get("content") for i in await two.get_items()] == ["Session 2 message 1"]


async def test_get_items_with_limit(async_convlog_client: AsyncConvlogClient) -> None:
    session = session_on(async_convlog_client)
    items = _items(
        *[
            (role, f"{'Message' if role == 'user' else 'Response'} {n}")
            for n in (1, 2, 3)
            for role in ("user", "assistant")
        ]
    )
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.get_items(limit=2) == items[-2:]
    assert await session.get_items(limit=4) == items[-4:]
    assert await session.get_items(limit=10) == items
    assert await session.get_items(limit=0) == []


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_list_input_is_appended_to_the_history(async_convlog_client: AsyncConvlogClient, streamed: bool) -> None:
    session = session_on(async_convlog_client)
    history = _items(("user", "Earlier message"), ("assistant", "Saved reply"))
    await session.add_items(history)
    model = ScriptedModel()
    model.enqueue([assistant_message("This should run")])
    list_input = [{"role": "user", "content": "Test message"}]
    await _run(Agent(name="test", model=model), list_input, streamed=streamed, session=session)
    assert model.calls[-1].input == history + list_input


async def test_session_input_callback_prepares_the_input(async_convlog_client: AsyncConvlogClient) -> None:
    session = session_on(async_convlog_client)
    history = _items(("user", "Hello there."), ("assistant", "Hi, I'm here to assist you."))
    await session.add_items(history)

    def only_user_messages(old: Items, new: Items) -> Items:
        return [item for item in old if item.get("role") == "user"] + new

    model = ScriptedModel()
    model.enqueue([assistant_message("I'm gpt-4o")])
    new_turn = [{"role": "user", "content": "What your name?"}]
    await Runner.run(
        Agent(name="test", model=model),
        new_turn,
        session=session,
        run_config=RunConfig(session_input_callback=only_user_messages),
    )
    assert model.calls[-1].input == [history[0], new_turn[0]]


async def test_a_callback_repeating_history_does_not_grow_the_session(async_convlog_client: AsyncConvlogClient) -> None:
    session = session_on(async_convlog_client)

    def repeat_first(old: Items, new: Items) -> Items:
        return [*old, old[0], *new] if old else new

    model = ScriptedModel()
    for turn in range(3):
        model.enqueue([assistant_message(f"assistant {turn}")])
        await Runner.run(
            Agent(name="test", model=model),
            f"user {turn}",
            session=session,
            run_config=RunConfig(session_input_callback=repeat_first),
        )
    stored = await session.get_items()
    assert [i.get("content") for i in stored if i.get("role") == "user"] == ["user 0", "user 1", "user 2"]
    assert len(stored) == 6


async def test_unicode_and_sql_like_content_round_trip(async_convlog_client: AsyncConvlogClient) -> None:
    session = session_on(async_convlog_client)
    items = _items(
        ("user", "こんにちは"),
        ("assistant", "😊👍"),
        ("user", "O'Reilly"),
        ("assistant", "Robert'); DROP TABLE students;--"),
        ("user", '"SELECT * FROM users";'),
    )
    await session.add_items(items)
    assert await session.get_items() == items


async def test_concurrent_adds_are_all_stored(async_convlog_client: AsyncConvlogClient) -> None:
    session = session_on(async_convlog_client)
    await asyncio.gather(*(session.add_items(_items(("user", f"Message {n}"))) for n in range(10)))
    assert sorted(str(i.get("content")) for i in await session.get_items()) == sorted(f"Message {n}" for n in range(10))


async def test_session_settings(async_convlog_client: AsyncConvlogClient) -> None:
    default = session_on(async_convlog_client)
    assert isinstance(default.session_settings, SessionSettings)
    assert default.session_settings.limit is None
    given = session_on(async_convlog_client, session_settings={"limit": 0})
    assert isinstance(given.session_settings, SessionSettings)
    assert given.session_settings.limit == 0
    with pytest.raises(TypeError, match="Unknown session settings: limitt"):
        session_on(async_convlog_client, session_settings={"limitt": 1})
    limited = session_on(async_convlog_client, session_settings=SessionSettings(limit=3))
    await limited.add_items(_items(*[("user", f"Message {n}") for n in range(5)]))
    assert [i.get("content") for i in await limited.get_items()] == ["Message 2", "Message 3", "Message 4"]
    assert [i.get("content") for i in await limited.get_items(limit=2)] == ["Message 3", "Message 4"]


async def test_the_run_config_session_settings_override_the_sessions(async_convlog_client: AsyncConvlogClient) -> None:
    session = session_on(async_convlog_client, session_settings=SessionSettings(limit=100))
    await session.add_items(_items(*[("user", f"Turn {n}") for n in range(10)]))
    model = ScriptedModel()
    model.enqueue([assistant_message("Got it")])
    await Runner.run(
        Agent(name="test", model=model),
        "New question",
        session=session,
        run_config=RunConfig(session_settings=SessionSettings(limit=2)),
    )
    history = [i for i in model.calls[-1].input if i.get("content") != "New question"]
    assert [i.get("content") for i in history] == ["Turn 8", "Turn 9"]


TOOL_PAIR_HISTORY = cast(
    "Items",
    [
        {"role": "user", "content": "What is the weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}],
        },
    ],
)


async def test_a_limit_never_passes_an_output_whose_call_it_cut(async_convlog_client: AsyncConvlogClient) -> None:
    """The SDK's test_session_limit_drops_unmatched_history_function_call_output: its SQLite
    session returns the orphan output and the Runner drops it; this session never returns it."""
    session = session_on(async_convlog_client)
    await session.add_items(TOOL_PAIR_HISTORY)
    assert await session.get_items(limit=2) == TOOL_PAIR_HISTORY[-1:]
    assert await session.get_items(limit=3) == TOOL_PAIR_HISTORY[-3:]
    model = ScriptedModel()
    model.enqueue([assistant_message("Tomorrow is sunny too.")])
    await Runner.run(
        Agent(name="test", model=model),
        "What about tomorrow?",
        session=session,
        run_config=RunConfig(session_settings=SessionSettings(limit=2)),
    )
    assert model.calls[-1].input == [TOOL_PAIR_HISTORY[-1], {"role": "user", "content": "What about tomorrow?"}]


# --- what convlog adds -------------------------------------------------------------------------


class LoseTheFirstAnswer(httpx.AsyncHTTPTransport):
    """The first append reaches the service and is stored; its answer is thrown away."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if request.method == "POST" and request.url.path.endswith("/messages"):
            self.keys.append(request.headers["Idempotency-Key"])
            if len(self.keys) == 1:
                await response.aread()
                await response.aclose()
                raise httpx.ReadTimeout("the answer was lost", request=request)
        return response


async def test_a_retried_add_items_is_stored_once_and_a_repeated_one_twice(served: str) -> None:
    transport = LoseTheFirstAnswer()
    async with AsyncConvlogClient(served, token=TOKEN, retry=NO_RETRY, transport=transport) as lossy:
        session = ConvlogSession(new_id(), client=lossy, user_id=USER)
        yes = _items(("user", "yes"))
        with pytest.raises(ClientTimeoutError):
            await session.add_items(yes)  # stored, but the caller cannot know
        await session.add_items(yes)  # the caller's retry: the same key, stored once
        assert await session.get_items() == yes
        await session.add_items(_items(("assistant", "Sure?")))
        await session.add_items(yes)  # the user says yes again: a new key, stored again
        assert [i["content"] for i in await session.get_items()] == ["yes", "Sure?", "yes"]  # type: ignore[typeddict-item]
    assert transport.keys[0] == transport.keys[1] != transport.keys[3]


async def test_popping_one_item_of_a_several_item_message_keeps_the_others(
    async_convlog_client: AsyncConvlogClient,
) -> None:
    session = session_on(async_convlog_client)
    items = cast(
        "Items",
        [
            {"role": "user", "content": "Tell me two things"},
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_1",
                "content": [{"type": "output_text", "text": "First.", "annotations": []}],
            },
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_2",
                "content": [{"type": "output_text", "text": "Second.", "annotations": []}],
            },
        ],
    )
    await session.add_items(items)  # one payload: the two assistant items are one stored message
    assert await session.get_items() == items
    assert await session.pop_item() == items[2]
    assert await session.get_items() == items[:2]
    assert await session.pop_item() == items[1]
    assert await session.get_items() == items[:1]
    transcript = (await async_convlog_client.messages(USER, session.session_id)).messages
    assert [(m.role, m.redacted) for m in transcript] == [("user", False), ("assistant", True), ("assistant", True)]


async def test_popping_an_output_hides_its_call_for_good(async_convlog_client: AsyncConvlogClient) -> None:
    """SQLiteSession would serve the call without its output from then on (the API refuses such
    an input); convlog serves neither: the popped output's call is not open any more, so
    an output sent for it again is refused as an orphan, as one for a call never made."""
    session = session_on(async_convlog_client)
    await session.add_items(TOOL_PAIR_HISTORY)
    assert await session.pop_item() == TOOL_PAIR_HISTORY[3]
    assert await session.pop_item() == TOOL_PAIR_HISTORY[2]
    assert await session.get_items() == TOOL_PAIR_HISTORY[:1]  # never a call without its output
    for orphan in (TOOL_PAIR_HISTORY[2], {"type": "function_call_output", "call_id": "nope", "output": "x"}):
        with pytest.raises(RejectedEventError) as refused:
            await session.add_items(cast("Items", [orphan]))
        assert refused.value.code == "orphan_tool_result"
    assert await session.get_items() == TOOL_PAIR_HISTORY[:1]


async def test_the_instructions_lead_the_items(async_convlog_client: AsyncConvlogClient) -> None:
    session = session_on(async_convlog_client)
    await session.add_items(_items(("system", "Be brief."), ("user", "Hi")))
    assert await session.get_items() == _items(("system", "Be brief."), ("user", "Hi"))
    assert await session.get_items(limit=1) == _items(("user", "Hi"))
    assert await session.pop_item() == {"role": "user", "content": "Hi"}
    assert await session.pop_item() == {"role": "system", "content": "Be brief."}
    assert await session.get_items() == []


async def test_reasoning_is_kept_and_never_cut_from_its_item(async_convlog_client: AsyncConvlogClient) -> None:
    session = session_on(async_convlog_client)
    items = cast(
        "Items",
        [
            {"role": "user", "content": "Think first"},
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "hmm"}],
                "encrypted_content": "opaque-blob",
            },
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_1",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
            },
        ],
    )
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.get_items(limit=2) == items[1:]
    assert await session.get_items(limit=1) == []  # the message without its reasoning: not served


async def test_the_redaction_route_keeps_the_audit_and_refuses_what_it_cannot_do(
    async_convlog_client: AsyncConvlogClient,
) -> None:
    conversation = new_id("c")
    pair = [{"role": "user", "content": "secret"}, {"role": "assistant", "content": "noted"}]
    sent = await async_convlog_client.append(USER, conversation, pair, format="responses")
    second = sent.messages[1].message_id
    assert second is not None
    assert "/" in second  # a native payload's second message: <first>/1, in the path as it is
    redacted = await async_convlog_client.redact(USER, conversation, second, reason="pii")
    context = await async_convlog_client.context(
        USER, conversation, model="gpt-4o", budget_tokens=1000, format="responses", min_offset=redacted.offset
    )
    assert context.input == [{"role": "user", "content": "secret"}]
    transcript = (await async_convlog_client.messages(USER, conversation)).messages
    assert [(m.message_id, m.redacted, m.content) for m in transcript][1] == (second, True, None)
    assert transcript[1].raw["redacted"]["reason"] == "pii"
    with pytest.raises(NotFoundError):
        await async_convlog_client.redact(USER, new_id("never"), second)
    with pytest.raises(RejectedRequestError) as refused:
        await async_convlog_client.redact(USER, conversation, second, reason="")
    assert refused.value.code == "invalid_reason"


async def test_the_summary_leads_the_items_and_is_never_popped(summarising: str) -> None:
    async with AsyncConvlogClient(summarising, token=TOKEN) as convlog:
        session = ConvlogSession(new_id(), client=convlog, user_id=USER)
        for t in range(8):
            await session.add_items(_items(("user", f"My favourite number is {t}."), ("assistant", f"Noted: {t}.")))
        # The window keeps turns 6 and 7 (at most 4 turns, 2 kept); the summarizer may record the
        # turns that left it in steps (0-2, then 3-5): pop only once it has caught up, or a step
        # landing mid-test changes how many items are served.
        window = _items(
            ("user", "My favourite number is 6."),
            ("assistant", "Noted: 6."),
            ("user", "My favourite number is 7."),
            ("assistant", "Noted: 7."),
        )
        deadline = asyncio.get_running_loop().time() + 30
        while (items := await session.get_items())[0].get("role") != "system" or items[1:] != window:
            assert asyncio.get_running_loop().time() < deadline, f"the summary did not catch up: {items}"
            await asyncio.sleep(0.2)
        summaries = [s for s in await convlog.summaries(USER, session.session_id) if s.status == "current"]
        assert len(summaries) == 1
        lead, rest = items[0], items[1:]
        assert str(lead.get("content")).endswith(str(summaries[0].text))
        assert "My favourite number is 5." in str(lead.get("content"))  # the turns that left the window
        assert await session.get_items(limit=len(items)) == items  # the summary counts as an item
        assert await session.get_items(limit=2) == rest[-2:]
        for _ in rest:
            assert (await session.pop_item()) is not None
        assert await session.pop_item() is None  # only the summary is left: nothing stored to pop
        assert (await session.get_items())[0] == lead
