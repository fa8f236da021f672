"""Read models of sealed conversations (issue 25, item 4) on real Postgres: rows whose source
record was sealed hold their content only sealed under the conversation's key
(projectors/sealed_rows.py), every reader serves them as the plain rows, a destroyed key reads
erased, an unknown one is refused, a rebuild writes the same bytes, and a scan of the Postgres
data directory and WAL finds none of the content.

The fold does not fill rows' key ids yet (the lead's decode of schema v5 does): a store that
stamps the conversation's key id on the rows and states the fold made stands in for it."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from events.embedded_log import EmbeddedEventLog
from events.errors import UnauthenticSealError, UnknownKeyError
from events.event_types import SummaryRecorded
from events.keys import ConversationKey
from events.producer import ConversationProducer
from events.sealing.envelope import row_associated_data
from events.sealing.keys import DataKey, DestroyedKey, UserSubject, new_key_id, new_secret
from pgstore.reads import PostgresReadModels
from pgstore.store import PostgresProjectionStore
from pgstore.summaries import PostgresSummaryStore
from pgstore.transcripts import ExportFilter, transcript_pages
from pgstore.versions import compare
from projectors.fold import BatchOutcome
from projectors.sealed_rows import RowSealer, open_row_bytes, row_ad, seal_row_bytes
from tests.projection_support import COUNTER, Projection, project_all

pytestmark = pytest.mark.postgres

ALICE = ConversationKey("acme", "alice", "c1")
BOB = ConversationKey("acme", "bob", "c1")


class DictKeyRing:
    """A :class:`~events.sealing.ports.KeyRing` over a dict (the real key store is elsewhere)."""

    def __init__(self) -> None:
        self.keys: dict[str, DataKey | DestroyedKey] = {}

    def lookup(self, key_id: str) -> DataKey | DestroyedKey | None:
        return self.keys.get(key_id)

    def create(self, conversation: ConversationKey) -> str:
        key = DataKey(
            new_key_id("conversation"), "conversation", UserSubject.of(conversation), conversation, new_secret()
        )
        self.keys[key.key_id] = key
        return key.key_id

    def destroy(self, key_id: str) -> datetime:
        key = self.keys[key_id]
        at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
        self.keys[key_id] = DestroyedKey(key.key_id, key.kind, key.user, key.conversation, destroyed_at=at)
        return at


class StampingStore(PostgresProjectionStore):
    """What the fold will do for sealed records: every row and state of a conversation in
    ``key_ids`` carries its key id (the rows are then stored sealed)."""

    key_ids: Mapping[str, str] = {}

    async def _fold(self, cur: Any, decoded: Any, **kwargs: Any) -> BatchOutcome:
        out = await super()._fold(cur, decoded, **kwargs)
        out.transcript = [replace(r, key_id=self.key_ids.get(r.conversation_key)) for r in out.transcript]
        out.summaries = [replace(r, key_id=self.key_ids.get(r.conversation_key)) for r in out.summaries]
        out.states = {k: replace(s, key_id=self.key_ids.get(k)) for k, s in out.states.items()}
        return out


def stamping_store(projection: Projection, schema: str, keys: DictKeyRing, key_ids: Mapping[str, str]) -> StampingStore:
    base = projection.store(schema=schema)
    store = StampingStore(
        projection.pool,
        schema=schema,
        codec=base._codec,
        counter=COUNTER,
        policy=base._policy,
        max_event_bytes=1 << 20,
        keys=keys,
    )
    store.key_ids = key_ids
    return store


async def write_conversation(producer: ConversationProducer, key: ConversationKey, mark: str) -> None:
    """A conversation with ``mark`` in every content field: title, metadata, content, names,
    tool call arguments, tool results, reasoning, native blocks (thinking, signature) and a summary."""
    await producer.start_conversation(key, title=f"title {mark}", metadata={"topic": f"meta {mark}"})
    await producer.append_system(key, f"system {mark}")
    await producer.append_user(
        key, f"question {mark}", name=f"name-{mark}", metadata={"m": f"um {mark}"}, message_id="asked"
    )
    await producer.append_assistant(
        key,
        f"answer {mark}",
        tool_calls=[
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": f'{{"q": "{mark}"}}'}}
        ],
        reasoning_content=f"reasoning {mark}",
        model="gpt-test",
        usage={"prompt_tokens": 10, "completion_tokens": 5},
        finish_reason="tool_calls",
    )
    await producer.append_tool_result(key, tool_call_id="call_1", content=f"tool result {mark}")
    await producer.append_anthropic_message(
        key,
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": f"thinking {mark}", "signature": f"signature{mark}"},
                {"type": "text", "text": f"native {mark}"},
            ],
        },
    )
    await producer.append_user(key, f"second question {mark}")
    await producer.append_assistant(key, f"redacted answer {mark}", name=f"kept-name-{mark}", message_id="redacted")
    await producer.redact(key, "redacted", reason="pii")
    await producer.append(
        key,
        SummaryRecorded(
            summary_id="s1",
            text=f"summary {mark}",
            covers_through_message_id="asked",
            model="offline",
            prompt_version="v1",
        ),
    )


async def everything_read(reads: PostgresReadModels, summaries: PostgresSummaryStore, key: ConversationKey) -> Any:
    """What every reader serves of ``key``: context inputs, transcript, summaries, the list,
    the summarizer's inputs and the export."""
    context = await reads.context_inputs(key, encoding="o200k_base")
    context_newest = await reads.context_inputs(key, encoding="cl100k_base", newest=3)
    transcript = await reads.transcript(key)
    listed = await reads.list_conversations(key.tenant_id, key.user_id)
    pending = await summaries.summary_inputs(reads.schema, key, max_rows=100)
    return context, context_newest, transcript, await reads.summaries(key), listed, pending


async def exported(projection: Projection, schema: str, keys: DictKeyRing | None) -> list[dict[str, Any]]:
    where = ExportFilter(tenant="acme")
    async with transcript_pages(projection.pool, schema, where, page_size=3, keys=keys) as found:
        return [row async for page in found.pages for row in page]


@pytest.fixture
async def two_versions(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> tuple[str, str, DictKeyRing, dict[str, str]]:
    """The same log projected plainly (the fixture's version) and sealed (a new one): ALICE
    and BOB sealed under their own keys."""
    await write_conversation(producer, ALICE, "alice")
    await write_conversation(producer, BOB, "bob")
    await project_all(log, projection.store())
    keys = DictKeyRing()
    key_ids = {str(ALICE): keys.create(ALICE), str(BOB): keys.create(BOB)}
    sealed = await projection.new_version()
    await project_all(log, stamping_store(projection, sealed.schema, keys, key_ids), batch_size=4)
    return projection.version.schema, sealed.schema, keys, key_ids


# Each table's content columns, then whether the row is sealed (a seal and its key id).
_CONTENT_COLUMNS = (
    "SELECT content, name, tool_calls, reasoning_content, blocks, sealed IS NOT NULL AND key_id IS NOT NULL "
    "FROM {s}.transcript",
    "SELECT text, sealed IS NOT NULL AND key_id IS NOT NULL FROM {s}.summaries",
    "SELECT title, sealed IS NOT NULL AND key_id IS NOT NULL FROM {s}.conversations",
)


async def test_sealed_rows_hold_no_content_in_clear_and_serve_what_plain_rows_serve(
    projection: Projection, two_versions: tuple[str, str, DictKeyRing, dict[str, str]]
) -> None:
    plain, sealed, keys, _ = two_versions
    for query in _CONTENT_COLUMNS:
        rows = await projection.rows(query, schema=sealed)
        assert rows
        assert {v for r in rows for v in r[:-1]} == {None}, query
        assert {r[-1] for r in rows} == {True}, query  # every row names its key and has its seal
    metadata = await projection.rows("SELECT DISTINCT metadata::text FROM {s}.transcript", schema=sealed)
    assert metadata == [("{}",)]
    # Every reader serves the same, the redacted message's kept name and cleared metadata included.
    for key in (ALICE, BOB):
        plain_reads = PostgresReadModels(projection.pool, schema=plain)
        sealed_reads = PostgresReadModels(projection.pool, schema=sealed, keys=keys)
        summarizer = PostgresSummaryStore(projection.pool, consumer="test", keys=keys)
        assert await everything_read(sealed_reads, summarizer, key) == await everything_read(
            plain_reads, summarizer, key
        )
    assert await exported(projection, sealed, keys) == await exported(projection, plain, None)


async def test_a_rebuild_writes_byte_identical_sealed_rows(
    projection: Projection, log: EmbeddedEventLog, two_versions: tuple[str, str, DictKeyRing, dict[str, str]]
) -> None:
    _, sealed, keys, key_ids = two_versions
    again = await projection.new_version()
    await project_all(log, stamping_store(projection, again.schema, keys, key_ids), batch_size=500)  # COPY, not INSERTs
    async with projection.pool.connection() as conn:
        assert await compare(conn, sealed, again.schema) == []
    query = "SELECT sealed FROM {s}.transcript ORDER BY conversation_key, seq"
    assert await projection.rows(query, schema=sealed) == await projection.rows(query, schema=again.schema)


async def test_a_destroyed_key_reads_as_erased_and_leaves_other_conversations_alone(
    projection: Projection, two_versions: tuple[str, str, DictKeyRing, dict[str, str]]
) -> None:
    plain, sealed, keys, key_ids = two_versions
    destroyed_at = keys.destroy(key_ids[str(ALICE)])
    reads = PostgresReadModels(projection.pool, schema=sealed, keys=keys)
    context = await reads.context_inputs(ALICE, encoding="o200k_base")
    assert context is not None
    assert context.summary is None
    for m in (*context.system, *context.messages):
        assert (m.content, m.name, m.tool_calls, m.reasoning_content, m.blocks, m.erased) == (
            None,
            None,
            (),
            None,
            (),
            True,
        )
    page = await reads.transcript(ALICE)
    assert page is not None
    for entry in page[0]:
        assert (entry["content"], entry["name"], entry["tool_calls"], entry["reasoning_content"]) == (None,) * 4
        assert entry["metadata"] == {}
        assert entry["erased_at"] == destroyed_at.isoformat()
    assert [s["status"] for s in await reads.summaries(ALICE) or []] == ["erased"]
    items, _ = await reads.list_conversations("acme", "alice")
    assert [i.title for i in items] == [None]
    plain_reads = PostgresReadModels(projection.pool, schema=plain)
    assert await reads.transcript(BOB) == await plain_reads.transcript(BOB)
    assert await reads.context_inputs(BOB, encoding="o200k_base") == await plain_reads.context_inputs(
        BOB, encoding="o200k_base"
    )


async def test_an_unknown_key_is_refused_not_served_and_other_conversations_still_read(
    projection: Projection, two_versions: tuple[str, str, DictKeyRing, dict[str, str]]
) -> None:
    _, sealed, keys, key_ids = two_versions
    del keys.keys[key_ids[str(ALICE)]]
    reads = PostgresReadModels(projection.pool, schema=sealed, keys=keys)
    with pytest.raises(UnknownKeyError, match="does not know"):
        await reads.context_inputs(ALICE, encoding="o200k_base")
    with pytest.raises(UnknownKeyError):
        await reads.transcript(ALICE)
    with pytest.raises(UnknownKeyError, match="no key ring"):
        await PostgresReadModels(projection.pool, schema=sealed).transcript(BOB)
    assert await reads.transcript(BOB) is not None


async def test_an_erase_removes_the_seals_and_the_rows_read_erased(
    projection: Projection,
    log: EmbeddedEventLog,
    producer: ConversationProducer,
    two_versions: tuple[str, str, DictKeyRing, dict[str, str]],
) -> None:
    plain, sealed, keys, key_ids = two_versions
    await producer.erase(ALICE)
    await project_all(log, projection.store())
    await project_all(log, stamping_store(projection, sealed, keys, key_ids))
    keys.destroy(key_ids[str(ALICE)])  # erasure destroys the key too: the rows read the same either way
    left = await projection.rows(
        "SELECT count(*) FROM {s}.transcript WHERE sealed IS NOT NULL AND conversation_key = %s",
        str(ALICE),
        schema=sealed,
    )
    assert left == [(0,)]
    reads = PostgresReadModels(projection.pool, schema=sealed, keys=keys)
    plain_reads = PostgresReadModels(projection.pool, schema=plain)
    assert await reads.transcript(ALICE) == await plain_reads.transcript(ALICE)
    assert await reads.summaries(ALICE) == await plain_reads.summaries(ALICE)


def test_the_same_row_seals_to_the_same_bytes_and_opens_only_where_it_belongs() -> None:
    secret = new_secret()
    one = seal_row_bytes(secret, b'{"content":"hi"}', b"ad-1")
    assert one == seal_row_bytes(secret, b'{"content":"hi"}', b"ad-1")
    assert one[:12] != seal_row_bytes(secret, b'{"content":"ho"}', b"ad-1")[:12]  # another plaintext, another nonce
    assert one[:12] != seal_row_bytes(secret, b'{"content":"hi"}', b"ad-2")[:12]  # another row, another nonce
    assert open_row_bytes(secret, one, b"ad-1") == b'{"content":"hi"}'
    with pytest.raises(Exception, match="fails authentication"):
        open_row_bytes(secret, one, b"ad-2")
    for args in ((str(ALICE), "transcript", "e1", "ck_1"), ("a:b:c", "summaries", "", "ck_2")):
        assert row_ad(*args) == row_associated_data(*args)
    ring = DictKeyRing()
    key_id = ring.create(ALICE)
    sealer = RowSealer(ring)
    sealed = sealer.seal("summaries", str(ALICE), "e1", key_id, {"text": "x"})
    with pytest.raises(Exception, match="fails authentication"):  # moved to another conversation
        sealer.open("summaries", str(BOB), "e1", key_id, sealed)


# --- the disk scan --------------------------------------------------------------------------


def _forms(marker: str) -> list[bytes]:
    """``marker`` as plain UTF-8, hex (both cases) and base64 at each of the three alignments."""
    raw = marker.encode()
    forms = [raw, raw.hex().encode(), raw.hex().upper().encode()]
    for pad in range(3):
        encoded = base64.b64encode(b"\x00" * pad + raw)
        forms.append(encoded[4 if pad else 0 : -4])  # the characters that depend on the marker only
    return forms


def _hits(root: Path, forms: Sequence[bytes]) -> list[tuple[str, bytes]]:
    found = []
    for path in _files(root):
        try:
            data = path.read_bytes()
        except (FileNotFoundError, PermissionError):  # a WAL segment recycled, a socket
            continue
        found += [(str(path.relative_to(root)), f) for f in forms if f in data]
    return found


def _files(root: Path) -> Iterator[Path]:
    for directory, _, names in os.walk(root):
        for name in names:
            yield Path(directory) / name


async def _data_directory(projection: Projection) -> Path:
    async with projection.pool.connection() as conn:
        await conn.execute("CHECKPOINT")  # the pages on disk, the WAL written
        row = await (await conn.execute("SHOW data_directory")).fetchone()
    assert row is not None
    root = Path(row[0])
    if not os.access(root, os.R_OK):
        pytest.skip(f"the Postgres data directory {root} is not readable here")
    return root


async def test_no_content_of_a_sealed_conversation_reaches_postgres_files_or_wal(
    projection: Projection, tmp_path: Path
) -> None:
    """Markers in every content field, projected sealed into a fresh database: the data
    directory, WAL included, holds none of them in plain, hex or base64 form before the erase
    and after it; the same conversation projected plainly (the control) is found, so the scan
    sees what is there."""
    mark, control = f"zq{uuid.uuid4().hex[:16]}", f"zc{uuid.uuid4().hex[:16]}"
    sealed_key = ConversationKey("acme", "sealed", "c1")
    plain_key = ConversationKey("acme", "plain", "c1")
    log = EmbeddedEventLog.open(tmp_path / "events.log", partitions=2)
    try:
        producer = ConversationProducer(log, producer="scan")
        await write_conversation(producer, sealed_key, mark)
        await write_conversation(producer, plain_key, control)
        keys = DictKeyRing()
        key_ids = {str(sealed_key): keys.create(sealed_key)}
        await project_all(log, stamping_store(projection, projection.version.schema, keys, key_ids), batch_size=3)
        reads = PostgresReadModels(projection.pool, schema=projection.version.schema, keys=keys)
        page = await reads.transcript(sealed_key)
        assert page is not None
        assert any(mark in str(e["content"]) for e in page[0])  # served, from the seals
        root = await _data_directory(projection)
        assert _hits(root, _forms(control)), "the control conversation's content is on disk in clear"
        assert _hits(root, _forms(mark)) == []
        await producer.erase(sealed_key)
        await project_all(log, stamping_store(projection, projection.version.schema, keys, key_ids))
        keys.destroy(key_ids[str(sealed_key)])
        root = await _data_directory(projection)
        assert _hits(root, _forms(mark)) == []
    finally:
        await log.close()


def test_a_row_sealer_that_opened_a_key_reads_erased_the_moment_it_is_destroyed() -> None:
    # RowSealer keeps one cipher per key: a key destroyed after rows were opened with it must
    # read erased on the very next row, never from what was kept.
    ring = DictKeyRing()
    conversation = ConversationKey("t", "u", "c")
    key_id = ring.create(conversation)
    sealer = RowSealer(ring)
    sealed = sealer.seal("transcript", str(conversation), "e1", key_id, {"content": '"MARKER"'})
    assert sealer.open("transcript", str(conversation), "e1", key_id, sealed).values == {"content": '"MARKER"'}
    destroyed_at = ring.destroy(key_id)
    opened = sealer.open("transcript", str(conversation), "e1", key_id, sealed)
    assert (opened.values, opened.erased_at) == ({}, destroyed_at)
    assert key_id not in sealer._ciphers
    assert not sealer._opened._rows  # nothing of the destroyed key's rows is kept


def test_rows_opened_again_are_served_from_the_last_opened_and_only_as_sealed() -> None:
    """A context read again (the next turn's) opens only its new rows; the cache answers only
    for the exact sealed bytes and binding, so a redaction's reseal, another event's binding or
    a flipped bit never gets an old row's content."""
    ring = DictKeyRing()
    conversation = ConversationKey("t", "u", "c")
    key_id = ring.create(conversation)
    sealer = RowSealer(ring, opened_rows_bytes=10_000)
    sealed = sealer.seal("transcript", str(conversation), "e1", key_id, {"content": '"MARKER"'})
    assert sealed is not None
    first = sealer.open("transcript", str(conversation), "e1", key_id, sealed)
    assert sealer.open("transcript", str(conversation), "e1", key_id, sealed) is first  # served from the cache
    flipped = bytes([*sealed[:-1], sealed[-1] ^ 1])
    with pytest.raises(UnauthenticSealError):
        sealer.open("transcript", str(conversation), "e1", key_id, flipped)
    with pytest.raises(UnauthenticSealError):  # the same bytes bound to another event: refused, not served
        sealer.open("transcript", str(conversation), "e2", key_id, sealed)
    resealed = sealer.seal("transcript", str(conversation), "e1", key_id, {"content": None})
    assert sealer.open("transcript", str(conversation), "e1", key_id, resealed).values == {}
    # Bounded by bytes: rows past the bound push the oldest out.
    for i in range(200):
        row = sealer.seal("transcript", str(conversation), f"m{i}", key_id, {"content": f'"{"x" * 40}"'})
        sealer.open("transcript", str(conversation), f"m{i}", key_id, row)
    assert sealer._opened._bytes <= 10_000
    assert sealer._opened.get((key_id, "transcript", str(conversation), "e1", sealed)) is None
