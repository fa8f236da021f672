"""What a batch's fold needs of the stored rows, read in one round trip.

The batch transaction used to send its reads one after another — the positions it fences on,
the conversations' states, which are parked, which event ids were applied, where referenced
messages are, kept summaries, redacted messages: up to seven round trips before the first
write, each ~0.3-0.45 ms on this machine, most of a one-record batch's transaction (what a
read-your-writes request waits for). They do not depend on one another, so they go to Postgres
as one psycopg pipeline, in the order they were sent before (the positions' ``FOR UPDATE``
first), and their results are read after one sync.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, LiteralString

from psycopg import AsyncConnection
from psycopg.rows import dict_row

from pgstore.read_sql import KEPT_TEXT, SUMMARY_COVERED, in_schema
from pgstore.sealed import open_dict_row
from projectors.context_range import SummaryAt
from projectors.errors import PositionConflictError
from projectors.fold import BatchInputs, Lookups
from projectors.rows import message_at, state_from_row
from projectors.sealed_rows import RowSealer
from projectors.state import MessageAt

# The same statement turns synchronous_commit off for this transaction only (SET LOCAL; no extra
# round trip): the commit returns without waiting for its WAL flush. A crash can then lose the
# last batches' commits, but positions commit atomically with their rows and the log is the
# source of truth, so the projector re-applies exactly that tail from the log
# (tests/kafka/test_async_commit_crash.py). The API's and ops' writes keep the server's setting.
POSITIONS_FOR_UPDATE: LiteralString = (
    "SELECT partition, next_offset, set_config('synchronous_commit', 'off', true) "
    "FROM {s}.positions WHERE partition = ANY(%s) FOR UPDATE"
)
_STATES: LiteralString = (
    "SELECT c.*, w.start_seq, w.turn_starts FROM {s}.conversations c "
    "LEFT JOIN {s}.windows w USING (conversation_key) WHERE c.conversation_key = ANY(%s)"
)
# FOR SHARE: a concurrent release of one of these conversations waits for this batch.
_PARKED: LiteralString = "SELECT conversation_key FROM {s}.parked WHERE conversation_key = ANY(%s) FOR SHARE"
_APPLIED_EVENT_IDS: LiteralString = (
    "SELECT DISTINCT t.conversation_key, t.event_id FROM unnest(%s::text[], %s::text[]) AS v(k, id) "
    "JOIN {s}.event_ids t ON t.conversation_key = v.k AND t.event_id = v.id"
)
_MESSAGES_AT: LiteralString = (
    "SELECT t.conversation_key, t.message_id, t.seq, t.epoch, t.turn, t.role "
    "FROM unnest(%s::text[], %s::text[]) AS v(k, id) "
    "JOIN {s}.transcript t ON t.conversation_key = v.k AND t.message_id = v.id ORDER BY t.seq"
)
_KEPT_SUMMARIES: LiteralString = (
    "SELECT x.conversation_key, x.seq, x.epoch, covered.seq AS covers, covered.turn AS covers_turn "
    "FROM {s}.summaries x " + SUMMARY_COVERED + "WHERE x.conversation_key = ANY(%s) AND " + KEPT_TEXT
)
_REDACTED_MESSAGES: LiteralString = (  # the partial index transcript_redacted
    "SELECT conversation_key, message_id, seq, epoch, turn, role "
    "FROM {s}.transcript WHERE conversation_key = ANY(%s) AND redacted_at IS NOT NULL"
)


class BatchInputReader:
    """Reads :class:`BatchInputs` (and, when asked, checks the positions) for one schema."""

    def __init__(self, schema: str, *, sealer: RowSealer | None = None) -> None:
        self._schema = schema
        self._sealer = sealer  # opens a sealed conversation's title and metadata

    def _q(self, text: LiteralString) -> bytes:
        return in_schema(self._schema, text)

    async def read(
        self,
        conn: AsyncConnection[Any],
        look: Lookups,
        *,
        skips: Mapping[tuple[int, int], str],
        parked_override: str | None,
        positions: Mapping[int, int] | None = None,
    ) -> BatchInputs:
        """The stored rows ``look`` asks for. With ``positions`` (partition -> expected next
        offset), those positions are locked first and must agree, else
        :class:`PositionConflictError` (the transaction is then to be rolled back)."""
        keys = sorted(look.keys)
        queries: dict[str, tuple[bytes, list[Any]]] = {}
        if positions is not None:
            queries["positions"] = (self._q(POSITIONS_FOR_UPDATE), [sorted(positions)])
        queries["states"] = (self._q(_STATES), [keys])
        queries["parked"] = (self._q(_PARKED), [keys])
        for name, text, pairs in (
            ("seen", _APPLIED_EVENT_IDS, look.event_ids),
            ("known", _MESSAGES_AT, look.referenced_messages),
        ):
            if pairs:
                conversations, ids = zip(*pairs, strict=True)
                queries[name] = (self._q(text), [list(conversations), list(ids)])
        if look.redacting:
            queries["summaries"] = (self._q(_KEPT_SUMMARIES), [sorted(look.redacting)])
        if look.listing:
            queries["redacted"] = (self._q(_REDACTED_MESSAGES), [sorted(look.listing)])
        rows = await _pipelined(conn, queries)
        if positions is not None:
            check_positions(positions, {r["partition"]: r["next_offset"] for r in rows["positions"]})
        known: dict[tuple[str, str], list[MessageAt]] = {}
        for r in rows.get("known", ()):
            known.setdefault((r["conversation_key"], r["message_id"]), []).append(message_at(r))
        summaries: dict[str, list[SummaryAt]] = {}
        for r in rows.get("summaries", ()):
            at = SummaryAt(r["seq"], r["epoch"], r["covers"], r["covers_turn"])
            summaries.setdefault(r["conversation_key"], []).append(at)
        redacted: dict[str, list[tuple[str, MessageAt]]] = {}
        for r in rows.get("redacted", ()):
            redacted.setdefault(r["conversation_key"], []).append((r["message_id"], message_at(r)))
        parked = frozenset(r["conversation_key"] for r in rows["parked"] if r["conversation_key"])
        return BatchInputs(
            states={
                r["conversation_key"]: state_from_row(open_dict_row(self._sealer, "conversations", r))
                for r in rows["states"]
            },
            parked=parked - {parked_override},
            seen_event_ids=frozenset((r["conversation_key"], r["event_id"]) for r in rows.get("seen", ())),
            known_messages=known,
            skips=skips,
            summaries=summaries,
            redacted=redacted,
        )


def check_positions(expected: Mapping[int, int], stored: Mapping[int, int]) -> None:
    wrong = {p: (o, stored.get(p)) for p, o in expected.items() if stored.get(p) != o}
    if wrong:
        raise PositionConflictError(
            "positions moved under this consumer (expected, stored): "
            + ", ".join(f"p{p}: {e} != {s}" for p, (e, s) in sorted(wrong.items()))
        )


async def _pipelined(
    conn: AsyncConnection[Any], queries: Mapping[str, tuple[bytes, Sequence[Any]]]
) -> dict[str, list[dict[str, Any]]]:
    """Each query's rows, the queries sent in order as one pipeline (one round trip)."""
    cursors = {}
    async with conn.pipeline():
        for name, (query, params) in queries.items():
            cursors[name] = cur = conn.cursor(row_factory=dict_row)
            await cur.execute(query, params)
    rows = {}
    for name, cur in cursors.items():
        rows[name] = await cur.fetchall()
        await cur.close()
    return rows
