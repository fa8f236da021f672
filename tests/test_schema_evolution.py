"""Schema evolution: released schemas never change, the fixtures of every released version keep
decoding, newer schemas read older records (writer/reader resolution by fingerprint), and
older codecs refuse newer records instead of misreading them."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastavro.schema import to_parsing_canonical_form

from events.codec import HEADER_SIZE, EventCodec, default_codec
from events.errors import ConfigurationError, CorruptRecordError, UnknownSchemaError
from events.event_types import ConversationErased, Event, MessageAppended, SummaryRecorded
from tests.fixtures.events import make_fixtures
from tests.fixtures.events.expected import FIXTURES_DIR, all_fixtures, fixture_versions

SCHEMAS_DIR = FIXTURES_DIR.parents[2] / "schemas"
FIXTURES = all_fixtures()

# A released schema's fingerprint is part of every record written with it: pin each one here.
RELEASED_FINGERPRINTS = {
    1: "fcf25474182b1aac",
    2: "2b9d8c016a5d255a",
    3: "c07e85466174d466",
    4: "43514994cee6648f",
}

Schema = dict[str, Any]


def schema_versions() -> list[int]:
    pattern = re.compile(r"event\.v([1-9][0-9]*)\.avsc")
    return sorted(int(m[1]) for p in SCHEMAS_DIR.iterdir() if (m := pattern.fullmatch(p.name)))


def load_schema(version: int) -> Schema:
    schema: Schema = json.loads((SCHEMAS_DIR / f"event.v{version}.avsc").read_text(encoding="utf-8"))
    return schema


def only_version(tmp_path: Path, version: int) -> Path:
    directory = tmp_path / f"only-v{version}"
    directory.mkdir()
    shutil.copy(SCHEMAS_DIR / f"event.v{version}.avsc", directory)
    return directory


def record_schema(schema: Schema, name: str) -> Any:
    """A named record (in place) in the body union, or Usage inside MessageAppended."""
    body = next(f["type"] for f in schema["fields"] if f["name"] == "body")
    for record in body:
        if record["name"] == name:
            return record
    message = next(r for r in body if r["name"] == "MessageAppended")
    usage = next(f["type"][1] for f in message["fields"] if f["name"] == "usage")
    assert usage["name"] == name
    return usage


def add_fields(schema: Schema, name: str, *fields: Schema) -> None:
    record_schema(schema, name)["fields"].extend(fields)


def compatible_v2(v1: Schema) -> Schema:
    """v1 plus optional fields with defaults; no enum symbol changes."""
    v2 = copy.deepcopy(v1)
    v2["doc"] = "synthetic v2 for tests"
    add_fields(v2, "MessageAppended", {"name": "audio_transcript", "type": ["null", "string"], "default": None})
    add_fields(v2, "Usage", {"name": "total_tokens", "type": ["null", "long"], "default": None})
    add_fields(
        v2,
        "SummaryRecorded",
        {"name": "language", "type": "string", "default": "und"},
        {"name": "usage", "type": ["null", "convlog.events.Usage"], "default": None},  # a by-name reference
    )
    add_fields(
        v2,
        "ConversationStarted",
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    )
    return v2


def schema_dir(tmp_path: Path, *, name: str = "v1+v2", v2: Callable[[Schema], Schema] = compatible_v2) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    shutil.copy(SCHEMAS_DIR / "event.v1.avsc", directory)
    (directory / "event.v2.avsc").write_text(json.dumps(v2(load_schema(1)), indent=2), encoding="utf-8")
    return directory


def future_schema_dir(tmp_path: Path) -> Path:
    """Every released schema plus a compatible synthetic next version: the codec of a build
    newer than this one."""
    directory = tmp_path / "future"
    directory.mkdir()
    for version in schema_versions():
        shutil.copy(SCHEMAS_DIR / f"event.v{version}.avsc", directory)
    latest = max(schema_versions())
    (directory / f"event.v{latest + 1}.avsc").write_text(
        json.dumps(compatible_v2(load_schema(latest))), encoding="utf-8"
    )
    return directory


# ---- released schemas and their fixtures ---------------------------------------------------------


def crc64_avro(data: bytes) -> int:
    """The Avro spec's 64-bit Rabin fingerprint, written out independently of fastavro."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def test_fingerprint_is_little_endian_crc64_avro_of_the_canonical_form(tmp_path: Path) -> None:
    assert crc64_avro(b'"null"') == 7195948357588979594  # the Avro test vector (Java parsingFingerprint64)
    canonical = to_parsing_canonical_form(load_schema(1))
    assert canonical.startswith('{"name":"convlog.events.Event","type":"record","fields":[')
    expected = crc64_avro(canonical.encode()).to_bytes(8, "little")
    assert EventCodec(schema_dir=only_version(tmp_path, 1)).fingerprint == expected


def test_released_schemas_are_unchanged(tmp_path: Path) -> None:
    assert set(RELEASED_FINGERPRINTS) <= set(schema_versions())
    for version, fingerprint in RELEASED_FINGERPRINTS.items():
        assert EventCodec(schema_dir=only_version(tmp_path, version)).fingerprint.hex() == fingerprint


def test_every_schema_version_has_fixtures_carrying_its_fingerprint(tmp_path: Path) -> None:
    assert fixture_versions() == schema_versions(), "run `python -m tests.fixtures.events.make_fixtures`"
    for version in fixture_versions():
        fingerprint = EventCodec(schema_dir=only_version(tmp_path, version)).fingerprint
        for fixture in (f for f in FIXTURES if f.version == version):
            assert fixture.data()[2:HEADER_SIZE] == fingerprint, fixture.id


def test_default_codec_writes_the_newest_version() -> None:
    assert default_codec().version == max(schema_versions())


# ---- a newer schema reads older records --------------------------------------------------------


def test_v2_reads_every_fixture_of_v1(tmp_path: Path) -> None:
    """(The mechanics, on a synthetic v2 next to v1; the real v2 reading every released
    version's fixtures is tests/test_codec.py's business.)"""
    codec = EventCodec(schema_dir=schema_dir(tmp_path))
    assert codec.version == 2
    for fixture in (f for f in FIXTURES if f.version == 1):
        assert codec.decode(fixture.data()) == fixture.expected(), fixture.id


def test_v2_writes_with_its_own_fingerprint_and_reads_its_own_records(tmp_path: Path) -> None:
    v1 = EventCodec(schema_dir=only_version(tmp_path, 1))
    v2 = EventCodec(schema_dir=schema_dir(tmp_path))
    assert v2.fingerprint != v1.fingerprint
    for event in map(_as_v1, make_fixtures.SAMPLES.values()):
        data = v2.encode(event)
        assert data[2:HEADER_SIZE] == v2.fingerprint
        assert v2.decode(data) == event


def _as_v1(event: Event) -> Event:
    """The sample without what the real v2 to v5 added (the synthetic v2 here derives from v1)."""
    if isinstance(event.body, SummaryRecorded):
        return dataclasses.replace(event, body=dataclasses.replace(event.body, excluded_message_ids=None))
    if isinstance(event.body, ConversationErased):
        plain = dataclasses.replace(event.body, only_if_last_offset=None, subject=None, requested_by=None)
        return dataclasses.replace(event, body=plain)
    if isinstance(event.body, MessageAppended):  # v4: its Chat Completions view is what v1 holds
        usage = event.body.usage and dataclasses.replace(event.body.usage, cache_write_tokens=None)
        v1 = dataclasses.replace(event.body, blocks=(), provider=None, api=None, is_error=None, usage=usage)
        return dataclasses.replace(event, body=v1)
    return event


def test_v1_only_codec_refuses_v2_records(tmp_path: Path) -> None:
    v1 = EventCodec(schema_dir=only_version(tmp_path, 1))
    v2 = EventCodec(schema_dir=schema_dir(tmp_path))
    for event in make_fixtures.SAMPLES.values():
        with pytest.raises(UnknownSchemaError) as caught:
            v1.decode(v2.encode(event))
        assert caught.value.fingerprint == v2.fingerprint


_CLEARED_V1 = (FIXTURES_DIR / "v1" / "conversation_cleared_minimal.bin").read_bytes()
OLD_CORRUPT = {
    "negative union index": _CLEARED_V1[:-2] + b"\x01\x00",  # fastavro alone would read ConversationErased
    "union index out of range": _CLEARED_V1[:-2] + b"\x0c\x00",
    "truncated": _CLEARED_V1[:-1],
    "trailing byte": _CLEARED_V1 + b"\x00",
}


@pytest.mark.parametrize("record", OLD_CORRUPT.values(), ids=OLD_CORRUPT.keys())
def test_older_records_are_still_checked_strictly(tmp_path: Path, record: bytes) -> None:
    assert _CLEARED_V1[-2:] == b"\x08\x00"  # body union index 4 (ConversationCleared), reason null
    with pytest.raises(CorruptRecordError):
        EventCodec(schema_dir=schema_dir(tmp_path)).decode(record)


def test_a_new_field_without_default_breaks_old_records_loudly(tmp_path: Path) -> None:
    def incompatible(v1: Schema) -> Schema:
        v2 = copy.deepcopy(v1)
        add_fields(v2, "MessageRedacted", {"name": "redacted_by", "type": "string"})
        return v2

    codec = EventCodec(schema_dir=schema_dir(tmp_path, v2=incompatible))
    with pytest.raises(CorruptRecordError, match="schema v1"):
        codec.decode((FIXTURES_DIR / "v1" / "message_redacted.bin").read_bytes())


# ---- finding and loading schemas ---------------------------------------------------------------


def test_the_highest_version_number_writes(tmp_path: Path) -> None:
    directory = schema_dir(tmp_path)
    v10 = compatible_v2(load_schema(1))
    add_fields(v10, "ConversationCleared", {"name": "by", "type": ["null", "string"], "default": None})
    (directory / "event.v10.avsc").write_text(json.dumps(v10), encoding="utf-8")
    for ignored in ("event.v1.avsc.orig", "event.v01.avsc", "event.vX.avsc", "notes.avsc"):
        (directory / ignored).write_text("not a schema", encoding="utf-8")
    codec = EventCodec(schema_dir=directory)
    assert codec.version == 10
    for fixture in (f for f in FIXTURES if f.version == 1):
        assert codec.decode(fixture.data()) == fixture.expected(), fixture.id


def test_no_schema_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"no event\.vN\.avsc"):
        EventCodec(schema_dir=tmp_path)


def test_a_broken_schema_file_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / "event.v1.avsc").write_text('{"type": "record", "name": "Event", "fields": [', encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"event\.v1\.avsc"):
        EventCodec(schema_dir=tmp_path)


def test_a_body_type_unknown_to_the_model_is_a_configuration_error(tmp_path: Path) -> None:
    def extra_body(v1: Schema) -> Schema:
        v2 = copy.deepcopy(v1)
        body = next(f["type"] for f in v2["fields"] if f["name"] == "body")
        body.append({"type": "record", "name": "ConversationArchived", "fields": []})
        return v2

    with pytest.raises(ConfigurationError, match="ConversationArchived"):
        EventCodec(schema_dir=schema_dir(tmp_path, v2=extra_body))


# ---- the fixture generator ---------------------------------------------------------------------


def test_make_fixtures_writes_the_committed_fixtures_and_refuses_to_overwrite(tmp_path: Path) -> None:
    target = make_fixtures.write_fixtures(tmp_path)
    current = FIXTURES_DIR / target.name
    assert target.name == f"v{default_codec().version}"
    written = sorted(p.name for p in target.iterdir())
    assert written == sorted(p.name for p in current.iterdir())
    for name in written:
        assert (target / name).read_bytes() == (current / name).read_bytes(), name
    with pytest.raises(FileExistsError):
        make_fixtures.write_fixtures(tmp_path)
    assert make_fixtures.main(["--root", str(tmp_path)]) == 1
