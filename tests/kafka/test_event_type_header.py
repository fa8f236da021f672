"""The ``convlog.event_type`` header is optional and never decides anything: records from a
foreign producer that sends Avro's full name, another value or no header at all are projected
and summarized exactly like convlog's own (docs/producers.md, "Record headers")."""

from __future__ import annotations

from collections.abc import Awaitable

import pytest

from events.event_types import MessageAppended
from events.keys import ConversationKey
from tests.fake_llm import FakeLLM
from tests.kafka.test_summarizer import stack

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

HEADERS: dict[str, bytes | None] = {
    "short-name": b"MessageAppended",  # what convlog's own producer sends
    "avro-full-name": b"convlog.events.MessageAppended",  # Schema.getFullName() in Java
    "other-value": b"chat.message.v1",
    "absent": None,
}


async def test_foreign_records_are_summarized_whatever_their_event_type_header(
    kafka_bootstrap: str, pg_admin_url: str
) -> None:
    with FakeLLM().running() as fake:
        async with stack(kafka_bootstrap, pg_admin_url, fake) as s:
            keys = {name: ConversationKey("acme", "java", f"header-{name}") for name in HEADERS}
            last: dict[int, int] = {}
            for t in range(1, 10):  # turn 9 makes turns 1-3 leave the window (8 turns, keep 6)
                for name, header in HEADERS.items():
                    for role, text, message_id in (
                        ("user", f"Q{t}: item {t}?", f"u{t}"),
                        ("assistant", f"Answer {t}.", f"a{t}"),
                    ):
                        body = MessageAppended(
                            message_id=message_id,
                            role=role,
                            content=text,
                            finish_reason="stop" if role == "assistant" else None,
                        )
                        _, data = s.producer.build(keys[name], body)
                        headers = [] if header is None else [("convlog.event_type", header)]
                        at = await s.log.append(key=keys[name].encode(), value=data, headers=headers)
                        last[at.partition] = max(last.get(at.partition, -1), at.offset)
            for partition, offset in last.items():
                await s.summarized(partition, offset)

            async def summaries() -> list[tuple[str, str]]:
                rows = await s.projection.rows("SELECT conversation_key, covers_through_message_id FROM {s}.summaries")
                return sorted((r[0], r[1]) for r in rows)

            expected = sorted((str(k), "a3") for k in keys.values())
            await s.wait(lambda: _equal(summaries(), expected), timeout_s=20)
            assert len(fake.answered()) == len(HEADERS)


async def _equal(rows: Awaitable[list[tuple[str, str]]], expected: list[tuple[str, str]]) -> bool:
    return await rows == expected
