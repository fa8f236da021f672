"""EventCodec: fixtures, round trips, the wire format, and every way a record can be corrupt."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer
from hypothesis import given
from hypothesis import strategies as st

from events.blocks import chat_view
from events.codec import HEADER_SIZE, MAGIC, EventCodec, default_codec
from events.errors import CorruptRecordError, DecodeError, InvalidEventError, UnknownSchemaError
from events.event_types import (
    API_FORMATS,
    BODY_TYPES,
    FINISH_REASONS,
    ROLES,
    ConversationCleared,
    ConversationErased,
    ConversationStarted,
    Event,
    ImagePart,
    MediaBlock,
    MessageAppended,
    MessageRedacted,
    OpaqueBlock,
    ReasoningBlock,
    SummaryRecorded,
    TextBlock,
    TextPart,
    ToolCall,
    ToolCallBlock,
    Usage,
)
from events.keys import ConversationKey
from tests.fixtures.events.expected import FIXTURES_DIR, Fixture, all_fixtures, fixture_versions
from tests.fixtures.events.make_fixtures import SAMPLES

CODEC = default_codec()
FIXTURES = all_fixtures()
AT = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
KEY = ConversationKey("t", "u", "c")


# ---- fixtures ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda f: f.id)
def test_fixture_decodes_to_its_expected_event(fixture: Fixture) -> None:
    event = CODEC.decode(fixture.data())
    assert event == fixture.expected()
    assert event.occurred_at.utcoffset() == timedelta(0)
    assert type(event.key) is ConversationKey
    if isinstance(event.body, MessageAppended):
        assert type(event.body.tool_calls) is tuple
        assert event.body.content is None or isinstance(event.body.content, str | tuple)


def test_fixtures_cover_every_body_type_in_every_version() -> None:
    assert fixture_versions(), "no fixtures"
    for version in fixture_versions():
        fixtures = [f for f in FIXTURES if f.version == version]
        assert {type(f.expected().body) for f in fixtures} == set(BODY_TYPES), f"v{version}"
        assert all(f.path.with_suffix(".json").is_file() for f in fixtures)


def test_current_fixtures_are_what_the_encoder_writes_byte_for_byte() -> None:
    current = [f for f in FIXTURES if f.version == CODEC.version]
    assert current, f"no fixtures for the current schema v{CODEC.version}: run make_fixtures"
    for fixture in current:
        assert CODEC.encode(fixture.expected()) == fixture.data(), fixture.id


def test_strict_reader_agrees_with_fastavro_on_every_current_fixture() -> None:
    version = CODEC._current  # an interoperability check of the private reader
    for fixture in (f for f in FIXTURES if f.version == CODEC.version):
        data = fixture.data()
        assert version.read(data, HEADER_SIZE) == (_fastavro_read(data), len(data)), fixture.id


def _fastavro_read(data: bytes) -> Any:
    return schemaless_reader(
        io.BytesIO(data[HEADER_SIZE:]),
        CODEC._current.schema,
        None,
        return_named_type=True,
        return_named_type_override=True,
    )


# ---- API and wire format -------------------------------------------------------------------------


def test_single_object_header() -> None:
    data = CODEC.encode(SAMPLES["message_user_text"])
    assert data[:2] == MAGIC == b"\xc3\x01"
    assert len(CODEC.fingerprint) == 8
    assert data[2:HEADER_SIZE] == CODEC.fingerprint
    assert CODEC.content_type.startswith("application/vnd.apache.avro+binary")


def test_default_codec_is_built_once() -> None:
    assert default_codec() is default_codec()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_round_trip_of_every_sample(name: str) -> None:
    event = SAMPLES[name]
    assert CODEC.decode(CODEC.encode(event)) == event


@pytest.mark.parametrize("body_type", BODY_TYPES, ids=lambda t: t.__name__)
def test_round_trip_of_every_body_type_with_defaults(body_type: type) -> None:
    required: dict[type, tuple[Any, ...]] = {
        MessageAppended: ("m", "user"),
        MessageRedacted: ("m", "why"),
        SummaryRecorded: ("s", "text", "m", "model", "p1"),
    }
    event = Event("e", KEY, AT, "p", body_type(*required.get(body_type, ())))
    assert CODEC.decode(CODEC.encode(event)) == event


def test_decode_accepts_memoryview_and_bytearray() -> None:
    event = SAMPLES["message_user_parts"]
    data = CODEC.encode(event)
    assert CODEC.decode(memoryview(data)) == event
    assert CODEC.decode(memoryview(b"xx" + data)[2:]) == event
    assert CODEC.decode(bytearray(data)) == event  # type: ignore[arg-type]


def test_non_utc_time_is_stored_as_the_same_instant() -> None:
    local = datetime(2025, 3, 1, 20, 0, 0, 5, tzinfo=timezone(timedelta(hours=8)))
    decoded = CODEC.decode(CODEC.encode(Event("e", KEY, local, "p", ConversationCleared())))
    assert decoded.occurred_at == local
    assert decoded.occurred_at.tzinfo == UTC
    assert decoded.occurred_at == datetime(2025, 3, 1, 12, 0, 0, 5, tzinfo=UTC)


# ---- encode refuses what the schema cannot hold ------------------------------------------------


@pytest.mark.parametrize(
    ("event", "field"),
    [
        (Event("e", KEY, datetime(2025, 1, 1), "p", ConversationCleared()), "occurred_at"),  # noqa: DTZ001
        (
            Event("e", KEY, datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))), "p", ConversationCleared()),
            "occurred_at",
        ),
        (Event("e", KEY, AT, "p", MessageAppended("m", "robot")), "event"),  # type: ignore[arg-type]
        (Event("e", KEY, AT, "p", MessageAppended("m", "user", finish_reason="done")), "event"),  # type: ignore[arg-type]
        (Event("e", KEY, AT, "p", MessageAppended("m", "user", (ImagePart("u", "huge"),))), "event"),  # type: ignore[arg-type]
        (Event("e", KEY, AT, "p", MessageAppended("m", "user", usage=Usage(2**63))), "event"),
        (Event("e", KEY, AT, "p", MessageRedacted("m", None)), "event"),  # type: ignore[arg-type]
        (Event("e", KEY, AT, "p", ConversationCleared("\ud800")), "event"),
        (Event("e", KEY, AT, "p", "not a body"), "body"),  # type: ignore[arg-type]
    ],
)
def test_encode_refuses_events_the_schema_cannot_hold(event: Event, field: str) -> None:
    with pytest.raises(InvalidEventError) as caught:
        CODEC.encode(event)
    assert caught.value.field == field


# ---- corrupt records -----------------------------------------------------------------------------


def zz(n: int) -> bytes:
    """Avro zigzag varint."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return zz(len(raw)) + raw


def record(body_index: int, body: bytes, **envelope: bytes) -> bytes:
    """A hand-written v-current record; ``envelope`` overrides encoded envelope fields."""
    fields = {
        "event_id": s("e-1"),
        "tenant_id": s("t"),
        "user_id": s("u"),
        "conversation_id": s("c"),
        "occurred_at": zz((AT - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)),
        "producer": s("p"),
    } | envelope
    return MAGIC + CODEC.fingerprint + b"".join(fields.values()) + zz(body_index) + body


def message(**fields: bytes) -> bytes:
    """A hand-written MessageAppended body: m-1, role user, everything else empty."""
    names = "message_id role content name tool_calls tool_call_id reasoning_content"
    names += " thinking_duration_ms model usage finish_reason metadata blocks provider api is_error sealed"
    defaults = dict.fromkeys(names.split(), zz(0)) | {"message_id": s("m-1"), "role": zz(1)}
    return b"".join((defaults | fields).values())


def test_hand_written_records_decode() -> None:
    assert CODEC.decode(record(1, message())) == Event("e-1", KEY, AT, "p", MessageAppended("m-1", "user"))
    assert CODEC.decode(record(4, zz(1) + s("x"))).body == ConversationCleared("x")
    assert CODEC.decode(record(5, zz(0) * 4)).body == ConversationErased()
    erased = record(5, zz(0) + zz(1) + zz(7) + zz(1) + s("user") + zz(0))
    assert CODEC.decode(erased).body == ConversationErased(only_if_last_offset=7, subject="user")


def test_non_minimal_varints_decode_where_the_record_reader_reads_inline() -> None:
    one, seven, zero = b"\x82\x00", b"\x8e\x00", b"\x80\x00"  # zigzag 1, 7, 0 in two bytes
    body = message(
        message_id=b"\x86\x00m-1",
        role=one,
        name=one + one + b"n",
        thinking_duration_ms=one + seven,
        tool_calls=zero,
        provider=zero,
    )
    assert CODEC.decode(record(1, body)).body == MessageAppended("m-1", "user", name="n", thinking_duration_ms=7)


def test_spec_legal_block_encodings_decode() -> None:
    call = s("c1") + s("f") + s("{}")
    blocks = zz(1) + call + zz(-1) + zz(len(call)) + call + zz(0)  # second block carries its size
    entries = zz(1) + s("a") + s("1") + zz(-1) + zz(4) + s("b") + s("2") + zz(0)
    body = message(tool_calls=blocks, metadata=entries, finish_reason=b"\x82\x00" + zz(0))  # non-minimal index
    decoded = CODEC.decode(record(1, body)).body
    assert decoded == MessageAppended(
        "m-1",
        "user",
        tool_calls=(ToolCall("c1", "f", "{}"),) * 2,
        finish_reason="stop",
        metadata={"a": "1", "b": "2"},
    )


CORRUPT: dict[str, bytes] = {
    "body union index 6": record(6, zz(0)),
    "body union index -1": record(-1, zz(0)),  # fastavro's reader would return ConversationErased
    "role enum index 4": record(1, message(role=zz(4))),
    "role enum index -1": record(1, message(role=zz(-1))),
    "content union index 3": record(1, message(content=zz(3))),
    "content union index -1": record(1, message(content=zz(-1) + zz(0))),
    "content part union index 2": record(1, message(content=zz(2) + zz(1) + zz(2) + s("x") + zz(0))),
    "content part union index -1": record(1, message(content=zz(2) + zz(1) + zz(-1) + s("x") + zz(0))),
    "image detail enum index 3": record(1, message(content=zz(2) + zz(1) + zz(1) + s("u") + zz(3) + zz(0))),
    "usage union index -1": record(1, message(usage=zz(-1) + zz(0) * 4)),
    "finish_reason union index 2": record(1, message(finish_reason=zz(2))),
    "finish_reason enum index 5": record(1, message(finish_reason=zz(1) + zz(5))),
    "finish_reason enum index -1": record(1, message(finish_reason=zz(1) + zz(-1))),
    # The record readers read these fields inline (events/avro_reader.py): still refused there.
    # Each would decode to a valid event if an index wrapped around or took the wrong branch.
    "body union index -1 before a valid ConversationStarted": record(-1, zz(0) * 2),
    "name union index -1": record(1, message(name=zz(-1))),
    "name union index 2": record(1, message(name=zz(2) + s("x"))),
    "thinking_duration_ms union index -1": record(1, message(thinking_duration_ms=zz(-1))),
    "usage tokens union index -1": record(1, message(usage=zz(1) + zz(-1) + zz(0) * 4)),
    "block union index -1": record(1, message(blocks=zz(1) + zz(-1) + s("p") + s("{}") + zz(0))),
    "text block item_id union index -1": record(1, message(blocks=zz(1) + zz(0) + s("x") + zz(-1) + zz(0) * 2)),
    "media kind enum index 2": record(1, message(blocks=zz(1) + zz(1) + zz(2) + zz(0) * 7)),
    "media kind enum index -1": record(1, message(blocks=zz(1) + zz(1) + zz(-1) + zz(0) * 7)),
    "role enum index 64": record(1, message(role=zz(64))),
    "string running past the end": record(1, zz(5) + b"ab"),
    "optional string running past the end": record(4, zz(1) + zz(5) + b"ab"),
    "varint over 64 bits": record(1, message(thinking_duration_ms=zz(1) + b"\xff" * 10 + b"\x01")),
    "negative string length": record(1, message(message_id=zz(-3) + b"abc")),
    "array count beyond the record": record(1, message(tool_calls=zz(1 << 40))),
    "map count beyond the record": record(1, message(metadata=zz(-(1 << 40)) + zz(0))),
    "invalid UTF-8": record(1, message(message_id=s(b"\xff\xfe"))),
    "overlong UTF-8": record(1, message(message_id=s(b"\xc0\xaf"))),
    "UTF-8 encoded surrogate": record(4, zz(1) + s(b"\xed\xa0\x80")),
    "timestamp after year 9999": record(4, zz(0), occurred_at=zz(2**62)),
    "timestamp before year 1": record(4, zz(0), occurred_at=zz(-(2**62))),
    "empty tenant id": record(4, zz(0), tenant_id=s("")),
    "control character in user id": record(4, zz(0), user_id=s("a\x00b")),
    "trailing byte": record(4, zz(0)) + b"\x00",
    "truncated body": record(1, message())[:-1],
    "body missing": MAGIC + CODEC.fingerprint,
    "wrong magic": b"\xc3\x02" + record(4, zz(0))[2:],
    "Avro object container file": b"Obj\x01" + bytes(20),
    "short header": MAGIC + CODEC.fingerprint[:7],
    "empty": b"",
}


@pytest.mark.parametrize("data", CORRUPT.values(), ids=CORRUPT.keys())
def test_corrupt_record_is_refused(data: bytes) -> None:
    with pytest.raises(CorruptRecordError) as caught:
        CODEC.decode(data)
    assert str(caught.value)
    assert caught.value.__cause__ is not None or caught.value.__context__ is None


def test_corruption_messages_say_what_is_wrong() -> None:
    def message_of(name: str) -> str:
        with pytest.raises(CorruptRecordError) as caught:
            CODEC.decode(CORRUPT[name])
        return str(caught.value)

    assert "magic" in message_of("wrong magic")
    assert "header" in message_of("short header")
    assert "trailing" in message_of("trailing byte")
    assert "truncated" in message_of("truncated body")
    assert "UTF-8" in message_of("invalid UTF-8")
    assert "union index -1" in message_of("body union index -1")
    assert "enum index 4" in message_of("role enum index 4")
    assert "union index 6 out of range" in message_of("body union index 6")
    assert "enum index 2 out of range" in message_of("media kind enum index 2")
    assert "union index 2 out of range" in message_of("name union index 2")


def test_unknown_fingerprint_is_refused_with_the_fingerprint() -> None:
    other = bytes(b ^ 0xFF for b in CODEC.fingerprint)
    data = MAGIC + other + CODEC.encode(SAMPLES["message_user_text"])[HEADER_SIZE:]
    with pytest.raises(UnknownSchemaError) as caught:
        CODEC.decode(data)
    assert caught.value.fingerprint == other
    assert other.hex() in str(caught.value)


def test_every_truncation_of_every_sample_is_refused() -> None:
    for event in SAMPLES.values():
        data = CODEC.encode(event)
        for size in range(len(data)):
            with pytest.raises(CorruptRecordError):
                CODEC.decode(data[:size])


def test_every_single_bit_flip_of_every_fixture_decodes_or_is_refused() -> None:
    # Avro has no checksum: a flip inside a string still decodes (to another valid event).
    for fixture in FIXTURES:
        data = fixture.data()
        for bit in range(len(data) * 8):
            flipped = bytearray(data)
            flipped[bit // 8] ^= 1 << (bit % 8)
            _decodes_or_refuses(bytes(flipped))


# ---- properties --------------------------------------------------------------------------------

texts = st.text(max_size=30)
optional_texts = st.none() | texts
longs = st.integers(-(2**63), 2**63 - 1)
optional_longs = st.none() | longs
metadata = st.dictionaries(texts, texts, max_size=3)
key_parts = st.text(st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=20).filter(str.strip)
parts = st.one_of(
    st.builds(TextPart, texts),
    st.builds(ImagePart, texts, st.sampled_from(["auto", "low", "high"])),
)
usages = st.none() | st.builds(Usage, optional_longs, optional_longs, optional_longs, optional_longs, optional_longs)
details = st.none() | st.sampled_from(["auto", "low", "high"])
blocks = st.one_of(
    st.builds(TextBlock, texts, optional_texts, optional_texts),
    st.builds(
        MediaBlock,
        st.sampled_from(["image", "file"]),
        optional_texts,
        optional_texts,
        optional_texts,
        details,
        optional_texts,
        optional_texts,
    ),
    st.builds(ToolCallBlock, texts, texts, texts, optional_texts, optional_texts, optional_texts),
    st.builds(
        ReasoningBlock,
        optional_texts,
        st.none() | st.lists(texts, max_size=3).map(tuple),
        optional_texts,
        optional_texts,
        optional_texts,
        optional_texts,
        optional_texts,
    ),
    st.builds(OpaqueBlock, texts, texts),
)


@st.composite
def native_messages(draw: st.DrawFn) -> MessageAppended:
    """A message with blocks: content and tool_calls are their view (what decoding derives)."""
    role = draw(st.sampled_from(ROLES))
    native = draw(st.lists(blocks, min_size=1, max_size=5).map(tuple))
    content, tool_calls = chat_view(native, role=role)
    return MessageAppended(
        message_id=draw(texts),
        role=role,
        content=content,
        name=draw(optional_texts),
        tool_calls=tool_calls,
        tool_call_id=draw(optional_texts),
        model=draw(optional_texts),
        usage=draw(usages),
        finish_reason=draw(st.none() | st.sampled_from(FINISH_REASONS)),
        metadata=draw(metadata),
        blocks=native,
        provider=draw(optional_texts),
        api=draw(st.none() | st.sampled_from(API_FORMATS) | texts),
        is_error=draw(st.none() | st.booleans()),
    )


messages = st.builds(
    MessageAppended,
    message_id=texts,
    role=st.sampled_from(ROLES),
    content=st.none() | texts | st.lists(parts, max_size=3).map(tuple),
    name=optional_texts,
    tool_calls=st.lists(st.builds(ToolCall, texts, texts, texts), max_size=3).map(tuple),
    tool_call_id=optional_texts,
    reasoning_content=optional_texts,
    thinking_duration_ms=optional_longs,
    model=optional_texts,
    usage=usages,
    finish_reason=st.none() | st.sampled_from(FINISH_REASONS),
    metadata=metadata,
    provider=optional_texts,
    api=st.none() | st.sampled_from(API_FORMATS),
    is_error=st.none() | st.booleans(),
)
bodies = st.one_of(
    st.builds(ConversationStarted, optional_texts, metadata),
    messages,
    native_messages(),
    st.builds(MessageRedacted, texts, texts),
    st.builds(SummaryRecorded, texts, texts, texts, texts, texts, optional_longs, optional_longs, optional_longs),
    st.builds(ConversationCleared, optional_texts),
    st.builds(ConversationErased, optional_texts),
)
events = st.builds(
    Event,
    event_id=texts,
    key=st.builds(ConversationKey, key_parts, key_parts, key_parts),
    occurred_at=st.datetimes(
        min_value=datetime(2, 1, 1),  # noqa: DTZ001 - hypothesis bounds are naive
        max_value=datetime(9998, 12, 31),  # noqa: DTZ001
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=8))]),
    ),
    producer=texts,
    body=bodies,
)


def _fastavro_write(event: Event) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, CODEC._current.schema, CODEC.to_record(event))
    return out.getvalue()


def test_compiled_writer_writes_what_fastavro_writes_for_every_sample() -> None:
    for name, event in SAMPLES.items():
        assert CODEC.encode(event)[HEADER_SIZE:] == _fastavro_write(event), name


@given(events)
def test_property_compiled_writer_agrees_with_fastavro(event: Event) -> None:
    assert CODEC.encode(event)[HEADER_SIZE:] == _fastavro_write(event)


@given(events)
def test_property_round_trip(event: Event) -> None:
    data = CODEC.encode(event)
    assert CODEC.decode(data) == event
    assert CODEC.encode(CODEC.decode(data)) == data
    assert CODEC._current.read(data, HEADER_SIZE) == (_fastavro_read(data), len(data))


@given(native_messages())
def test_property_every_block_type_round_trips(body: MessageAppended) -> None:
    event = Event("e-1", KEY, AT, "p", body)
    data = CODEC.encode(event)
    assert CODEC.decode(data) == event
    written = _fastavro_read(data)["body"][1]  # the blocks are the truth: no view on the wire
    assert (written["content"], written["tool_calls"], written["reasoning_content"]) == (None, [], None)


def test_a_foreign_record_with_blocks_and_a_view_of_its_own_is_read_from_its_blocks() -> None:
    body = MessageAppended("m-1", "assistant", blocks=(TextBlock("from the blocks"), ToolCallBlock("c1", "f", "{}")))
    record = CODEC.to_record(Event("e-1", KEY, AT, "p", body))
    record["body"][1].update(content="a view of its own", tool_calls=[{"id": "c9", "name": "g", "arguments": "[]"}])
    out = bytearray(MAGIC + CODEC.fingerprint)
    CODEC._current.write(record, out)
    decoded = CODEC.decode(bytes(out)).body
    assert isinstance(decoded, MessageAppended)
    assert (decoded.content, decoded.tool_calls) == ("from the blocks", (ToolCall("c1", "f", "{}"),))


def test_records_before_v4_read_with_no_blocks() -> None:
    older = [f for f in FIXTURES if f.version < 4 and isinstance(f.expected().body, MessageAppended)]
    assert len(older) == 3 * 7  # seven messages in each of v1, v2 and v3
    for fixture in older:
        body = CODEC.decode(fixture.data()).body
        assert isinstance(body, MessageAppended)
        assert (body.blocks, body.provider, body.api, body.is_error) == ((), None, None, None), fixture.id
        assert body.usage is None or body.usage.cache_write_tokens is None


def _decodes_or_refuses(data: bytes) -> None:
    try:
        event = CODEC.decode(data)
    except DecodeError:
        return
    assert isinstance(event, Event)
    assert isinstance(event.body, BODY_TYPES)
    assert CODEC.decode(CODEC.encode(event)) == event


@given(st.binary(max_size=200))
def test_property_random_bytes_never_escape(data: bytes) -> None:
    _decodes_or_refuses(data)


@given(st.binary(max_size=200))
def test_property_random_body_after_a_valid_header_never_escapes(body: bytes) -> None:
    _decodes_or_refuses(MAGIC + CODEC.fingerprint + body)


@given(events, st.data())
def test_property_bit_flips_never_escape(event: Event, data: st.DataObject) -> None:
    encoded = bytearray(CODEC.encode(event))
    for _ in range(data.draw(st.integers(1, 3))):
        bit = data.draw(st.integers(0, len(encoded) * 8 - 1))
        encoded[bit // 8] ^= 1 << (bit % 8)
    _decodes_or_refuses(bytes(encoded))


@given(events, st.data())
def test_property_truncation_is_corrupt(event: Event, data: st.DataObject) -> None:
    encoded = CODEC.encode(event)
    size = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(CorruptRecordError):
        CODEC.decode(encoded[:size])


@given(events, st.binary(min_size=1, max_size=8))
def test_property_trailing_bytes_are_corrupt(event: Event, tail: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        CODEC.decode(CODEC.encode(event) + tail)


def test_codec_from_an_explicit_schema_dir_matches_the_default() -> None:
    codec = EventCodec(schema_dir=FIXTURES_DIR.parents[2] / "schemas")
    assert (codec.version, codec.fingerprint) == (CODEC.version, CODEC.fingerprint)
