"""Migration 0008 fills the context-range columns of versions projected before it with what the
fold decides (projectors/context_range.py): a migrated version reads like a rebuilt one."""

from __future__ import annotations

import pytest
from psycopg import sql

from convlog.demo.run import append_oa_conversation
from events.embedded_log import EmbeddedEventLog
from events.event_types import SummaryRecorded
from events.keys import ConversationKey
from events.producer import ConversationProducer
from pgstore.migrate import load_migrations
from tests.projection_support import SEED_000_WINDOW, Projection, project_all

_COLUMNS = (
    "summary_seq",
    "summary_covers_seq",
    "summary_covers_turn",
    "turns_before_epoch",
    "redacted_questions",
    "context_start",
    "usable_turns",
)


def _summary(covers: str, summary_id: str) -> SummaryRecorded:
    return SummaryRecorded(
        summary_id=summary_id,
        text="They talked.",
        covers_through_message_id=covers,
        model="offline",
        prompt_version="v1",
    )


async def _conversations(producer: ConversationProducer) -> None:
    """Conversations that exercise every input: summaries kept and withdrawn, windows that moved,
    redacted questions, epochs after a clear and after an erase, no summary at all."""
    oa = ConversationKey("acme", "u", "oa")
    done = await append_oa_conversation(producer, oa)
    await producer.append(oa, _summary(done[5].message_id, "s1"))
    await producer.append(oa, _summary(done[13].message_id, "s2"))
    await producer.redact(oa, done[10].message_id, reason="pii")  # withdraws s2: s1 is current again
    await producer.redact(oa, done[15].message_id, reason="pii")
    cleared = ConversationKey("acme", "u", "cleared")
    first = await append_oa_conversation(producer, cleared)
    await producer.clear(cleared)
    again = await append_oa_conversation(producer, cleared)
    await producer.append(cleared, _summary(again[3].message_id, "s3"))
    await producer.append(cleared, _summary(first[3].message_id, "stale"))  # an old epoch's: withdrawn
    erased = ConversationKey("acme", "u", "erased")
    await append_oa_conversation(producer, erased)
    await producer.erase(erased)
    await producer.append_user(erased, "hello again")
    await append_oa_conversation(producer, ConversationKey("acme", "u", "plain"))


async def _range_columns(projection: Projection) -> list[tuple[object, ...]]:
    columns = sql.SQL(", ").join(map(sql.Identifier, _COLUMNS))
    query = sql.SQL("SELECT conversation_key, {} FROM {}.conversations ORDER BY conversation_key").format(
        columns, sql.Identifier(projection.version.schema)
    )
    async with projection.pool.connection() as conn:
        return await (await conn.execute(query)).fetchall()


@pytest.mark.postgres
async def test_0008_fills_the_columns_of_a_version_made_before_it_as_the_fold_does(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    await _conversations(producer)
    await project_all(log, projection.store(policy=SEED_000_WINDOW))
    folded = await _range_columns(projection)
    assert {row[1] for row in folded} != {None}  # some conversation has a current summary
    assert any(row[5] for row in folded)  # and some a redacted question
    schema = sql.Identifier(projection.version.schema)
    # As before 0008: neither its columns nor 0009's (which come after them), then both migrations.
    dropped = (*_COLUMNS, "sealed", "key_id")
    drop = sql.SQL(", ").join(sql.SQL("DROP COLUMN {}").format(sql.Identifier(c)) for c in dropped)
    migrations = [m for m in load_migrations() if m.version in {8, 9}]
    async with projection.pool.connection() as conn:
        order = "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
        order += "ORDER BY ordinal_position"
        made = await (await conn.execute(order, [projection.version.schema, "conversations"])).fetchall()
        await conn.execute(sql.SQL("ALTER TABLE {}.conversations ").format(schema) + drop)
        for migration in migrations:
            await conn.execute(migration.sql.encode())
        migrated = await (await conn.execute(order, [projection.version.schema, "conversations"])).fetchall()
    assert migrated == made  # the columns in read_models.sql's order
    assert await _range_columns(projection) == folded
