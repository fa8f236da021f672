"""The codec's writer from an event's own objects (events/event_writer.py) against the record
path it stands in for; tests/test_codec.py compares both with fastavro on every sample."""

from __future__ import annotations

import io
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastavro import schemaless_writer

from events.codec import HEADER_SIZE, EventCodec, default_codec
from events.errors import InvalidEventError
from events.event_types import Event, ImagePart, MessageAppended, TextBlock, TextPart, ToolCall, Usage
from events.keys import ConversationKey
from tests.fixtures.events.expected import FIXTURES_DIR
from tests.fixtures.events.make_fixtures import SAMPLES

SCHEMAS = FIXTURES_DIR.parents[2] / "schemas"
KEY = ConversationKey("t", "u", "c")
AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
MESSAGES = {
    "text": MessageAppended(message_id="m", role="user", content="提交之后 " * 40),
    "parts": MessageAppended(
        message_id="m", role="user", content=(TextPart("look"), ImagePart("https://example.com/a.png", "high"))
    ),
    "assistant": MessageAppended(
        message_id="m",
        role="assistant",
        content=None,
        tool_calls=(ToolCall("c1", "f", '{"a": 1}'),),
        model="gpt",
        usage=Usage(prompt_tokens=3, completion_tokens=1, cache_write_tokens=2),
        finish_reason="tool_calls",
        metadata={"k": "v"},
        provider="openai",
        api="chat_completions",
    ),
    "tool": MessageAppended(message_id="m", role="tool", content="", tool_call_id="c1", is_error=True, name="f"),
    "blocks": MessageAppended(message_id="m", role="assistant", content="hi", blocks=(TextBlock("hi"),)),
}


def _through_the_record(codec: EventCodec, event: Event) -> bytes:
    out = bytearray()
    codec._current.write(codec.to_record(event), out)
    return bytes(out)


@pytest.mark.parametrize("body", list(MESSAGES.values()), ids=list(MESSAGES))
def test_a_message_is_written_as_its_record_is(body: MessageAppended) -> None:
    codec = default_codec()
    event = Event("e-1", KEY, AT, "p", body)
    assert codec.encode(event)[HEADER_SIZE:] == _through_the_record(codec, event)


def test_every_sample_is_written_as_its_record_is() -> None:
    codec = default_codec()
    for name, event in SAMPLES.items():
        assert codec.encode(event)[HEADER_SIZE:] == _through_the_record(codec, event), name


def test_a_naive_time_is_refused_by_the_writer_too() -> None:
    event = Event("e-1", KEY, datetime(2025, 3, 1), "p", MESSAGES["text"])  # noqa: DTZ001 - the point
    with pytest.raises(InvalidEventError) as raised:
        default_codec().encode(event)
    assert raised.value.field == "occurred_at"


def test_a_schema_with_a_field_the_writer_does_not_know_writes_through_the_record(tmp_path: Path) -> None:
    """A newer schema's message field with a default: without its own writer the codec must
    still write every field (the default), not fail or drop it."""
    for schema in SCHEMAS.glob("event.v*.avsc"):
        shutil.copy(schema, tmp_path)
    newest = max(SCHEMAS.glob("event.v*.avsc"), key=lambda p: int(p.stem.split(".v")[1]))
    number = int(newest.stem.split(".v")[1]) + 1
    raw = json.loads(newest.read_text(encoding="utf-8"))
    message = next(
        b
        for b in next(f for f in raw["fields"] if f["name"] == "body")["type"]
        if b["name"].endswith("MessageAppended")
    )
    message["fields"].append({"name": "trace_id", "type": ["null", "string"], "default": None})
    (tmp_path / f"event.v{number}.avsc").write_text(json.dumps(raw), encoding="utf-8")
    codec = EventCodec(schema_dir=tmp_path)
    assert codec.version == number
    assert codec._current.write_event is None
    event = Event("e-1", KEY, AT, "p", MESSAGES["assistant"])
    expected = io.BytesIO()
    schemaless_writer(expected, codec._current.schema, codec.to_record(event))
    assert codec.encode(event)[HEADER_SIZE:] == expected.getvalue()
    assert codec.decode(codec.encode(event)) == event
