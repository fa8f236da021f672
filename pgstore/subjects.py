"""An erasure's subject as a read-models version knows it (``convlog erase``, docs/erasure.md):
the user's conversations (or the one), whether each is erased already, and how many of its
rows came from plain records — a NULL ``key_id`` (migration 0009): content the log holds
unsealed, which destroying keys cannot shred."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from pgstore.pool import PgPool

_SURVEY = sql.SQL(
    "SELECT c.conversation_id, "
    # Erased: the erase applied and nothing readable came after it (a later append makes a new row).
    "c.erased_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {s}.transcript t "
    "WHERE t.conversation_key = c.conversation_key AND t.erased_at IS NULL), "
    "(SELECT count(*) FROM {s}.transcript t WHERE t.conversation_key = c.conversation_key AND t.key_id IS NULL), "
    "(SELECT count(*) FROM {s}.summaries m WHERE m.conversation_key = c.conversation_key AND m.key_id IS NULL) "
    "FROM {s}.conversations c WHERE c.tenant_id = %s AND c.user_id = %s "
    "AND (%s::text IS NULL OR c.conversation_id = %s) ORDER BY c.conversation_id"
)


@dataclass(frozen=True, slots=True)
class KnownConversation:
    conversation_id: str
    erased: bool  # erased, and nothing appended since holds content
    plain_messages: int  # transcript rows of plain records (erased or not: the log keeps them)
    plain_summaries: int


async def known_conversations(
    pool: PgPool, schema: str, tenant_id: str, user_id: str, conversation_id: str | None = None
) -> list[KnownConversation]:
    """The user's conversations in ``schema`` (only ``conversation_id``'s when given)."""
    query = _SURVEY.format(s=sql.Identifier(schema))
    async with pool.connection() as conn:
        cursor = await conn.execute(query, [tenant_id, user_id, conversation_id, conversation_id])
        rows = await cursor.fetchall()
    return [KnownConversation(str(r[0]), bool(r[1]), int(r[2]), int(r[3])) for r in rows]
