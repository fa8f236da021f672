"""The client against a real ``convlog serve`` (the embedded log, the test Postgres): every call's
happy path, sync and async, and an append whose first answer is lost after the service stored
it — retried with the same Idempotency-Key, stored once."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import httpx
import pytest

from convlog.client import (
    AsyncConvlogClient,
    ConvlogClient,
    NotFoundError,
    RejectedEventError,
    UnauthorizedError,
    UserErasure,
)
from tests.live_server import TOKEN

CLIENT_PAGE = Path(__file__).resolve().parent.parent / "docs" / "client.md"

pytestmark = pytest.mark.postgres

MODEL = "gpt-4o"


def _conversation() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


def test_a_chat_turn_and_every_read_through_the_sync_client(served: str) -> None:
    conversation = _conversation()
    with ConvlogClient(served, token=TOKEN) as client:
        assert client.healthz()
        assert client.readyz().ready
        client.append("u1", conversation, {"role": "system", "content": "Be brief."})
        asked = client.append("u1", conversation, {"role": "user", "content": "What is 2+2?"})
        assert len(asked.messages) == 1
        assert asked.last.message_id
        assert asked.last.event_id
        ctx = client.context("u1", conversation, model=MODEL, budget_tokens=1000, min_offset=asked.offset)
        assert ctx.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
        assert ctx.format == "chat_completions"
        assert ctx.token_count > 0
        assert not ctx.encoding_estimated
        assert not ctx.counted_at_read
        gpt4 = client.context("u1", conversation, model="gpt-4", budget_tokens=1000, min_offset=asked.offset)
        assert (gpt4.messages, gpt4.encoding, gpt4.counted_at_read) == (ctx.messages, "cl100k_base", True)
        assert ctx.position.partition == asked.partition
        assert ctx.position.offset == asked.offset
        assert (ctx.summary, ctx.dropped_turns, ctx.dropped) == (None, 0, ())
        answered = client.append("u1", conversation, {"role": "assistant", "content": "4"}, idempotency_key="a-1")
        assert answered.last.event_id == "a-1"
        again = client.context("u1", conversation, model=MODEL, budget_tokens=1000, min_offset=answered.offset)
        assert again.messages[-1] == {"role": "assistant", "content": "4"}
        assert again.cacheable_prefix_tokens is not None
        assert 0 < again.cacheable_prefix_tokens < again.token_count  # the two contexts' shared start
        then = client.context("u1", conversation, model=MODEL, budget_tokens=1000, as_of=asked.offset)
        assert then.messages == ctx.messages
        assert then.cacheable_prefix_tokens is None  # an audit rebuild is not a context sent again

        page = client.messages("u1", conversation)
        assert [m.role for m in page.messages] == ["system", "user", "assistant"]
        assert page.messages[-1].event_id == "a-1"
        assert page.next_before is None
        pages = list(client.message_pages("u1", conversation, limit=2))
        assert [[m.content for m in p.messages] for p in pages] == [["What is 2+2?", "4"], ["Be brief."]]
        events = client.events("u1", conversation)
        assert [e.event_type for e in events] == ["MessageAppended"] * 3
        assert events[-1].offset == answered.offset
        assert client.summaries("u1", conversation) == []
        listed = client.conversations("u1")
        assert conversation in [c.conversation_id for c in listed.conversations]

        cleared = client.clear("u1", conversation)
        assert cleared.offset > answered.offset
        erased = client.erase("u1", conversation)
        assert erased.offset > cleared.offset
        assert [e.event_type for e in client.events("u1", conversation)][-2:] == [
            "ConversationCleared",
            "ConversationErased",
        ]


def test_the_services_refusals_arrive_as_client_errors(served: str) -> None:
    with ConvlogClient(served, token=TOKEN) as client:
        with pytest.raises(NotFoundError) as missing:
            client.context("u1", _conversation(), model=MODEL, budget_tokens=1000)
        assert missing.value.status == 404
        assert missing.value.code == "not_found"
        with pytest.raises(RejectedEventError) as refused:
            client.append("u1", _conversation(), {"role": "robot", "content": "x"})
        assert refused.value.status == 422
        assert refused.value.field == "role"
    with ConvlogClient(served, token=TOKEN + "-not") as stranger, pytest.raises(UnauthorizedError):
        stranger.conversations("u1")


class LoseTheFirstAnswer(httpx.HTTPTransport):
    """Sends each request to the service; the first append's answer is read and thrown away,
    and a timeout raised instead — the service stored the message, the client never heard."""

    def __init__(self) -> None:
        super().__init__()
        self.appends: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and request.url.path.endswith("/messages"):
            self.appends.append(request)
            if len(self.appends) == 1:
                response.read()
                response.close()
                raise httpx.ReadTimeout("the answer was lost", request=request)
        return response


def test_an_append_whose_answer_was_lost_is_retried_and_stored_once(served: str) -> None:
    conversation = _conversation()
    transport = LoseTheFirstAnswer()
    with ConvlogClient(served, token=TOKEN, transport=transport) as client:
        appended = client.append("u1", conversation, {"role": "user", "content": "only once"})
        events = client.events("u1", conversation)
    assert len(transport.appends) == 2
    assert [(e.event_type, e.offset) for e in events] == [("MessageAppended", appended.offset)]
    assert transport.appends[0].headers["Idempotency-Key"] == transport.appends[1].headers["Idempotency-Key"]


async def test_the_async_client_serves_a_chat_turn(served: str) -> None:
    conversation = _conversation()
    async with AsyncConvlogClient(served, token=TOKEN) as client:
        assert await client.healthz()
        asked = await client.append("u2", conversation, {"role": "user", "content": "Hello"})
        ctx = await client.context("u2", conversation, model=MODEL, budget_tokens=500, min_offset=asked.offset)
        assert ctx.messages == [{"role": "user", "content": "Hello"}]
        pages = [page async for page in client.message_pages("u2", conversation)]
        assert [m.content for m in pages[0].messages] == ["Hello"]
        assert [c.conversation_id async for p in client.conversation_pages("u2") for c in p.conversations] == [
            conversation
        ]
        assert [e.event_type for e in await client.events("u2", conversation)] == ["MessageAppended"]
        assert (await client.erase("u2", conversation)).offset > asked.offset


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_erasing_a_user_through_the_client(served: str, flavour: str) -> None:
    """Every conversation of the user erased, their keys destroyed; again: ``already``; a
    user nothing is known of: :class:`NotFoundError`."""
    user = f"gone-{uuid.uuid4().hex[:8]}"
    async with AsyncConvlogClient(served, token=TOKEN) as client:
        for conversation in ("a", "b"):
            written = await client.append(user, conversation, {"role": "user", "content": "forget me"})
            await client.context(user, conversation, model=MODEL, budget_tokens=500, min_offset=written.offset)

        async def erase_user(user_id: str) -> UserErasure:
            if flavour == "async":
                return await client.erase_user(user_id)
            with ConvlogClient(served, token=TOKEN) as sync_client:
                return sync_client.erase_user(user_id)

        erased = await erase_user(user)
        assert erased.user_id == user
        assert sorted(c for c, _, _ in erased.erased_conversations) == ["a", "b"]
        assert erased.destroyed_keys >= 3  # the user's key and each conversation's
        assert not erased.already
        assert [e.event_type for e in await client.events(user, "a")][-1] == "ConversationErased"
        again = await erase_user(user)
        assert again.already
        assert again.destroyed_keys == 0
        with pytest.raises(NotFoundError):
            await erase_user(f"never-{uuid.uuid4().hex[:8]}")


def test_the_client_page_example_runs(
    served: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    section = CLIENT_PAGE.read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert block
    monkeypatch.setenv("CONVLOG_URL", served)
    monkeypatch.setenv("CONVLOG_TOKEN", TOKEN)
    exec(block[1], {})  # noqa: S102 -- the docs' own example
    assert "{'role': 'user', 'content': 'Hello!'}" in capsys.readouterr().out
