"""query_api/openai_conversations.py without a server: a conversation folded from its events as
OpenAI's Conversations API shows it (an embedded log, no Postgres)."""

from __future__ import annotations

from events.embedded_log import EmbeddedEventLog
from events.keys import ConversationKey
from events.producer import ConversationProducer
from events.reading import conversation_events
from query_api.openai_conversations import OpenAIConversation, fold_conversation

KEY = ConversationKey("acme", "u1", "conv_1")


async def _folded(log: EmbeddedEventLog) -> OpenAIConversation | None:
    pairs = [pair async for pair in conversation_events(log, KEY)]
    return fold_conversation(pairs, max_event_bytes=1024 * 1024)


async def test_items_are_the_current_epochs_unredacted_messages_with_stable_ids(
    log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    assert await _folded(log) is None
    await producer.start_conversation(KEY, metadata={"a": "1"})
    await producer.append_native(KEY, "responses", [{"role": "user", "content": "old chat"}])
    await producer.clear(KEY)  # convlog's new chat: the items start again, the metadata stays
    hello = await producer.append_native(KEY, "responses", [{"role": "user", "content": "hello"}])
    await producer.append_native(
        KEY,
        "responses",
        [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "blob"},
            {"type": "message", "id": "msg_1", "role": "assistant", "content": "hi there"},
        ],
    )
    folded = await _folded(log)
    assert folded is not None
    assert folded.metadata == {"a": "1"}
    assert [(i.body["type"], i.siblings) for i in folded.items] == [("message", 1), ("reasoning", 2), ("message", 2)]
    first = folded.items[0]
    assert first.message_id == hello[0].message_id
    assert first.id.startswith("msg_")
    assert first.body == {
        "id": first.id,
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "hello"}],
    }
    assert [i.id for i in folded.items[1:]] == ["rs_1", "msg_1"]  # stored ids kept
    assert folded.items[2].body["content"] == [{"type": "output_text", "text": "hi there", "annotations": []}]
    again = await _folded(log)
    assert again is not None
    assert again.items == folded.items  # derived ids are stable across reads

    await producer.redact(KEY, hello[0].message_id, reason="deleted")
    redacted = await _folded(log)
    assert redacted is not None
    assert [i.id for i in redacted.items] == ["rs_1", "msg_1"]
    await producer.erase(KEY)
    assert await _folded(log) is None  # erased: gone, as OpenAI's deleted conversation
