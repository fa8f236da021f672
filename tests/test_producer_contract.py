"""docs/producers.md, held to the code: the fingerprints it lists (both notations), the limits it
quotes, its key and partition examples, the topic settings, and the rules a foreign record must
meet — each broken once, with the outcome the document promises (a dead letter and a parked
conversation). The Java example and the header rule run on Kafka: tests/kafka/."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiokafka.codec
import pytest

from events.blocks import native_message
from events.codec import MAGIC, EventCodec, default_codec
from events.embedded_log import EmbeddedEventLog
from events.event_types import (
    Block,
    Event,
    ImagePart,
    MediaBlock,
    MessageAppended,
    MessageRedacted,
    OpaqueBlock,
    ReasoningBlock,
    TextBlock,
    TextPart,
    ToolCall,
    ToolCallBlock,
)
from events.keys import ConversationKey, murmur2, partition_for_key
from events.log import LogRecord
from events.topic_settings import new_topic_configs
from projectors.fold import decode_one
from tests.java_example import VERIFIED_CODECS
from tests.kafka.test_java_producer_settings import RUNS as JAVA_RUNS
from tests.producer_doc import (
    DOC,
    SCHEMAS,
    cell,
    fingerprint_rows,
    readme_fingerprint_rows,
    table,
    topic_settings,
)
from tests.projection_support import Projection, project_all

CODEC = default_codec()
KEY = ConversationKey("acme", "employee-42", "c-1")


def fingerprint_of(version: int, tmp_path: Path) -> bytes:
    directory = tmp_path / f"v{version}"
    directory.mkdir()
    (directory / SCHEMAS[version].name).write_bytes(SCHEMAS[version].read_bytes())
    return EventCodec(schema_dir=directory).fingerprint


@pytest.mark.parametrize("rows", [fingerprint_rows, readme_fingerprint_rows], ids=["producers.md", "schemas/README"])
def test_every_schema_file_is_listed_with_its_wire_and_its_java_fingerprint(
    rows: Callable[[], list[Any]], tmp_path: Path
) -> None:
    listed = rows()
    assert [r.version for r in listed] == sorted(SCHEMAS)
    for row in listed:
        wire = fingerprint_of(row.version, tmp_path)
        assert row.wire == wire.hex()
        # Java's parsingFingerprint64 is this little-endian long; Long.toHexString prints it unsigned.
        assert row.java == format(int.from_bytes(wire, "little"), "x")
        assert row.java == wire[::-1].hex().lstrip("0")  # the byte-reversed wire form


def test_the_newest_schema_is_the_one_the_doc_says_to_write_with() -> None:
    newest = max(SCHEMAS)
    text = DOC.read_text(encoding="utf-8")
    assert f"Write with **`schemas/event.v{newest}.avsc`**" in text
    assert CODEC.version == newest


def _resolve(dotted: str) -> Any:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_the_limits_quoted_are_the_constants_the_code_checks() -> None:
    rows = table("What an event must satisfy")
    assert len(rows) >= 5
    for _, limit, where in rows:
        value = _resolve(cell(where))
        if isinstance(value, re.Pattern):
            assert cell(limit) == value.pattern
        elif isinstance(value, tuple):
            assert [cell(p) for p in limit.split(",")] == list(value)
        else:
            assert cell(limit) == str(value)


def test_the_key_examples_escape_and_partition_as_convlog_does() -> None:
    rows = table("The key")
    assert len(rows) == 3
    for tenant, user, conversation, key, hashed, partition in rows:
        built = ConversationKey(cell(tenant), cell(user), cell(conversation))
        assert str(built) == cell(key)
        assert ConversationKey.parse(cell(key)) == built
        assert murmur2(built.encode()) == int(cell(hashed))
        assert partition_for_key(built.encode(), 12) == int(cell(partition))


def test_the_topic_settings_are_those_convlog_creates_topics_with() -> None:
    documented = topic_settings()
    for replicas in (1, 2, 3, 5):
        expected = {k: str(min(2, replicas)) if v == "min(2, replicas)" else v for k, v in documented.items()}
        assert new_topic_configs(replicas) == expected


def test_the_safe_producer_settings_are_those_the_java_example_is_run_with() -> None:
    rows = {cell(r[0]): cell(r[1]) for r in table("Producer settings")}
    assert rows["acks"] == "all"
    assert rows["enable.idempotence"] == "true"
    assert rows["transactional.id"] == "allowed"
    listed = re.findall(r"`(\w+)`", rows["compression.type"])
    assert listed == ["none", *VERIFIED_CODECS]
    # Every codec the doc calls safe is one the Java example runs against convlog, and one this
    # environment decompresses (aiokafka's codec extras are installed).
    run_with = {s for run in JAVA_RUNS for s in run.settings}
    assert {f"compression.type={codec}" for codec in VERIFIED_CODECS} <= run_with
    assert any(run.transactional and run.abort_last for run in JAVA_RUNS)
    assert any(run.transactional and not run.abort_last for run in JAVA_RUNS)
    assert all(getattr(aiokafka.codec, f"has_{codec}")() for codec in VERIFIED_CODECS)
    assert "tests/kafka/test_java_producer_settings.py" in DOC.read_text(encoding="utf-8")


@pytest.mark.parametrize(("heading", "example"), [("Go", "go-producer"), ("TypeScript and Node.js", "ts-producer")])
def test_the_settings_each_language_section_lists_are_those_of_its_example(heading: str, example: str) -> None:
    root = DOC.parents[1] / "examples" / example
    files = [*root.glob("*.go"), *root.glob("src/*.ts")]  # the example's code (and the Go tests beside it)
    sources = "".join(p.read_text(encoding="utf-8") for p in files)
    rows = table(heading)
    assert {cell(r[0]) for r in rows} >= {"partitioner", "acks", "idempotence", "compression", "value"}
    for setting, value in rows:
        spans = re.findall(r"`([^`]+)`", value)
        assert spans, setting
        for span in spans:
            assert span in sources, f"{heading}: {setting} says {span}, which examples/{example} does not have"


# ---------------------------------------------------------------- what a foreign record must meet


def message(**fields: Any) -> MessageAppended:
    return MessageAppended(**{"message_id": "m1", "role": "user", "content": "hi", **fields})


def record(value: bytes, key: bytes = KEY.encode(), offset: int = 0) -> LogRecord:
    return LogRecord(partition=0, offset=offset, key=key, value=value, timestamp=datetime.now(UTC), headers=())


def encoded(body: Any, *, key: ConversationKey = KEY, event_id: str = "e1", producer: str = "java") -> bytes:
    """Encoded as a foreign producer would: the schema only, none of convlog's validation."""
    return CODEC.encode(Event(event_id, key, datetime.now(UTC), producer, body))


def native(*blocks: Block, role: Any = "assistant", **fields: Any) -> MessageAppended:
    return native_message(**{"message_id": "m1", "role": role, "blocks": blocks, "api": "anthropic", **fields})


def written(body: MessageAppended, **wire: Any) -> bytes:
    """A schema v4 record as a foreign producer may write it: ``wire`` overrides body fields of
    the Avro record (a view of its own beside the blocks, say)."""
    record = CODEC.to_record(Event("e1", KEY, datetime.now(UTC), "java", body))
    record["body"][1].update(wire)
    out = bytearray(MAGIC + CODEC.fingerprint)
    CODEC._current.write(record, out)
    return bytes(out)


CALL_BLOCK = ToolCallBlock("toolu_1", "get_weather", '{"city":"Paris"}')

BROKEN: dict[str, tuple[str, Callable[[], LogRecord]]] = {
    "event id too long": ("invalid_event", lambda: record(encoded(message(), event_id="e" * 129))),
    "message id too long": ("invalid_event", lambda: record(encoded(message(message_id="m" * 129)))),
    "blank producer": ("invalid_event", lambda: record(encoded(message(), producer=""))),
    "name outside the pattern": ("invalid_event", lambda: record(encoded(message(name="Ann Smith")))),
    "tool call name outside the pattern": (
        "invalid_event",
        lambda: record(
            encoded(message(role="assistant", content=None, tool_calls=(ToolCall("c1", "search kb", "{}"),)))
        ),
    ),
    "duplicate tool call ids": (
        "invalid_event",
        lambda: record(
            encoded(
                message(
                    role="assistant", content=None, tool_calls=(ToolCall("c1", "a", "{}"), ToolCall("c1", "b", "{}"))
                )
            )
        ),
    ),
    "tool call arguments not JSON": (
        "invalid_event",
        lambda: record(encoded(message(role="assistant", content=None, tool_calls=(ToolCall("c1", "a", "{oops"),)))),
    ),
    "user message without content": ("invalid_event", lambda: record(encoded(message(content="")))),
    "image in an assistant message": (
        "invalid_event",
        lambda: record(encoded(message(role="assistant", content=(TextPart("see"), ImagePart("https://x/y.png"))))),
    ),
    "image url of another scheme": (
        "invalid_event",
        lambda: record(encoded(message(content=(ImagePart("ftp://x/y.png"),)))),
    ),
    "tool message without tool_call_id": ("invalid_event", lambda: record(encoded(message(role="tool", content="{}")))),
    "tool message without content": (
        "invalid_event",
        lambda: record(encoded(message(role="tool", content=None, tool_call_id="c1"))),
    ),
    "reasoning on a user message": ("invalid_event", lambda: record(encoded(message(reasoning_content="hmm")))),
    "tool_call_id on an assistant message": (
        "invalid_event",
        lambda: record(encoded(message(role="assistant", content="x", tool_call_id="c1"))),
    ),
    "redaction without reason": ("invalid_event", lambda: record(encoded(MessageRedacted("m1", " ")))),
    "v4: reasoning block in a user message": (
        "invalid_event",
        lambda: record(encoded(native(ReasoningBlock(text="hmm"), TextBlock("hi"), role="user"))),
    ),
    "v4: tool call block arguments not JSON": (
        "invalid_event",
        lambda: record(encoded(native(ToolCallBlock("toolu_1", "f", "{oops")))),
    ),
    "v4: duplicate tool call block ids": ("invalid_event", lambda: record(encoded(native(CALL_BLOCK, CALL_BLOCK)))),
    "v4: empty reasoning block": ("invalid_event", lambda: record(encoded(native(ReasoningBlock(), CALL_BLOCK)))),
    "v4: extra not a JSON object": ("invalid_event", lambda: record(encoded(native(TextBlock("a", extra="[1]"))))),
    "v4: opaque block json not JSON": (
        "invalid_event",
        lambda: record(encoded(native(TextBlock("a"), OpaqueBlock("anthropic", "<xml/>")))),
    ),
    "v4: media block with url and data": (
        "invalid_event",
        lambda: record(
            encoded(
                native(MediaBlock("image", url="https://x/y.png", data="AAAA", media_type="image/png"), role="user")
            )
        ),
    ),
    "v4: unknown api": ("invalid_event", lambda: record(encoded(native(TextBlock("a"), api="bedrock")))),
    "v4: is_error on an assistant message": (
        "invalid_event",
        lambda: record(encoded(native(TextBlock("a"), is_error=True))),
    ),
    "v4: reasoning_content beside blocks": (
        "invalid_event",
        lambda: record(written(native(TextBlock("a")), reasoning_content="hmm")),
    ),
    "key part too long": ("invalid_key", lambda: record(encoded(message()), key=b"acme:" + b"u" * 257 + b":c-1")),
    "key with two parts": ("invalid_key", lambda: record(encoded(message()), key=b"acme:employee-42")),
    "key of another conversation": ("key_mismatch", lambda: record(encoded(message()), key=b"acme:employee-42:c-2")),
    "Confluent registry framing": ("corrupt_record", lambda: record(b"\x00\x00\x00\x00\x07" + encoded(message())[10:])),
    "unknown fingerprint": ("unknown_schema", lambda: record(MAGIC + bytes(8) + encoded(message())[10:])),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_foreign_record_that_breaks_a_rule_is_poison_with_the_documented_code(case: str) -> None:
    code, make = BROKEN[case]
    decoded = decode_one(make(), codec=CODEC, max_event_bytes=1 << 20)
    assert decoded.poison is not None, case
    assert decoded.poison.error_code == code
    assert code in DOC.read_text(encoding="utf-8")


def test_a_foreign_v4_record_with_a_view_of_its_own_is_read_from_its_blocks() -> None:
    value = written(native(TextBlock("the blocks"), CALL_BLOCK), content="another text", tool_calls=[])
    decoded = decode_one(record(value), codec=CODEC, max_event_bytes=1 << 20)
    assert decoded.poison is None
    assert decoded.event is not None
    body = decoded.event.body
    assert isinstance(body, MessageAppended)
    assert (body.content, body.tool_calls) == ("the blocks", (ToolCall("toolu_1", "get_weather", '{"city":"Paris"}'),))


def test_the_rules_leave_what_the_doc_allows() -> None:
    allowed = [
        message(role="tool", content="", tool_call_id="c1"),  # an empty tool result
        message(
            role="assistant", content=None, tool_calls=(ToolCall("c1", "a", "{oops"),), finish_reason="interrupted"
        ),  # an interrupted stream keeps its cut arguments
        message(role="assistant", content=None, finish_reason="interrupted"),
        message(message_id="m" * 128),
    ]
    for body in allowed:
        assert decode_one(record(encoded(body)), codec=CODEC, max_event_bytes=1 << 20).poison is None, body
    big = record(encoded(message(content="x" * 2000)))
    assert decode_one(big, codec=CODEC, max_event_bytes=1000).poison.error_code == "event_too_large"  # type: ignore[union-attr]


@pytest.mark.postgres
async def test_a_foreign_record_that_breaks_a_rule_is_dead_lettered_and_parks_only_its_conversation(
    projection: Projection, log: EmbeddedEventLog
) -> None:
    other = ConversationKey("acme", "employee-7", "c-9")
    await log.append(key=KEY.encode(), value=encoded(message(message_id="m1", content="first"), event_id="e1"))
    bad = await log.append(key=KEY.encode(), value=encoded(message(message_id="m2", name="Ann Smith"), event_id="e2"))
    await log.append(key=KEY.encode(), value=encoded(message(message_id="m3", content="after it"), event_id="e3"))
    await log.append(key=other.encode(), value=encoded(message(content="a neighbour"), key=other, event_id="e4"))
    await project_all(log, projection.store())

    letters = await projection.rows(
        'SELECT partition, "offset", conversation_key, error_code, status FROM {s}.dead_letters'
    )
    assert letters == [(bad.partition, bad.offset, str(KEY), "invalid_event", "parked")]
    assert await projection.rows("SELECT conversation_key FROM {s}.parked") == [(str(KEY),)]
    assert await projection.rows("SELECT count(*) FROM {s}.held_records") == [(1,)]  # "after it" waits in order
    texts = await projection.rows("SELECT conversation_key, content FROM {s}.transcript ORDER BY conversation_key")
    assert sorted(texts) == sorted([(str(KEY), "first"), (str(other), "a neighbour")])


@pytest.mark.postgres
async def test_a_foreign_v4_record_that_breaks_a_rule_is_dead_lettered_and_the_projector_goes_on(
    projection: Projection, log: EmbeddedEventLog
) -> None:
    other = ConversationKey("acme", "employee-7", "c-9")
    bad_body = native(ReasoningBlock(text="hmm"), TextBlock("hi"), role="user", message_id="m2")
    await log.append(key=KEY.encode(), value=encoded(message(message_id="m1", content="first"), event_id="e1"))
    bad = await log.append(key=KEY.encode(), value=encoded(bad_body, event_id="e2"))
    good = native(THOUGHT, TextBlock("a native answer"), CALL_BLOCK, message_id="m3")
    await log.append(key=other.encode(), value=encoded(good, key=other, event_id="e3"))
    await project_all(log, projection.store())

    letters = await projection.rows(
        'SELECT partition, "offset", conversation_key, error_code, error FROM {s}.dead_letters'
    )
    assert [row[:4] for row in letters] == [(bad.partition, bad.offset, str(KEY), "invalid_event")]
    assert "blocks[0]" in letters[0][4]
    assert await projection.rows("SELECT conversation_key FROM {s}.parked") == [(str(KEY),)]
    texts = await projection.rows("SELECT conversation_key, content FROM {s}.transcript ORDER BY conversation_key")
    assert sorted(texts) == sorted([(str(KEY), "first"), (str(other), "a native answer")])


THOUGHT = ReasoningBlock(text="the user wants the weather", signature="EqQBCgIYAhIM")
