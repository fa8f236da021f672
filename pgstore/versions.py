"""Projection versions (blue/green): each version's read models live in a schema of their own.

A rebuild creates version N+1 (``building``) beside the live one, fills it from offset 0,
compares checksums, and :func:`switch` makes it live in one transaction; the old one is
``retired`` but kept until it is dropped.

Each version records the window policy it is made with (migration 0006): whatever projects into,
verifies or rebuilds contexts of a version uses that one, not the current settings, so a changed
setting or default takes effect with the next rebuild and never moves a version's windows.

And each time a version becomes live, ``convlog.live_periods`` (migration 0007) records from where
on each partition it served, with its window, kept after the version is dropped: a context served
before a switch is rebuilt (``as_of``) with the window of the version that served it
(:func:`policy_served_at`). The hand-over on a partition is the replaced version's position
there: the live projectors project it until they see the switch (within ``CONVLOG_VERSION_POLL_S``),
so its positions, final once they followed, are read while its schema exists; ``convlog drop``
copies them into the row first (:func:`keep_hand_over`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from psycopg import AsyncConnection, sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from pgstore.event_index import ensure_event_index
from pgstore.pool import pg_errors
from projectors.errors import ProjectionError
from projectors.window import WindowPolicy

READ_MODELS = "read_models"
_DDL = resources.files("pgstore").joinpath("sql/read_models.sql")

# Tables compared between versions: all derived from events alone (operational tables — dead
# letters, parked and held records — describe the run, not the log).
CHECKED_TABLES: dict[str, str] = {
    "conversations": "conversation_key",
    "windows": "conversation_key",
    "transcript": "conversation_key, seq",
    "summaries": "conversation_key, seq",
    "event_ids": "conversation_key, event_id",
    # Every record's coordinates: a version made before the index holds them from its
    # event_index_from on (compared from the later of two versions' starts, see index_rows_from).
    "event_index": 'conversation_key, partition, "offset", event_id',
}


@dataclass(frozen=True, slots=True)
class ProjectionVersion:
    projection: str
    version: int
    schema: str
    status: str
    policy: WindowPolicy  # the window policy it is projected with (recorded when it was made)


def _version(row: Sequence[Any]) -> ProjectionVersion:
    projection, version, schema, status, max_turns, keep_turns = row
    return ProjectionVersion(projection, version, schema, status, WindowPolicy(max_turns, keep_turns))


def schema_name(projection: str, version: int) -> str:
    return f"convlog_{projection}_v{version}"


# What a switch NOTIFYs (the new live schema as payload), in its transaction: delivered at its
# commit to every API and projector LISTENing, so none reads or projects the retired version on.
VERSIONS_CHANNEL = "convlog_versions"

# Serialises the creation of versions (held to the end of the transaction that takes it).
_VERSIONS_LOCK = "SELECT pg_advisory_xact_lock(hashtext('convlog.projection_versions'))"


async def create_version(
    conn: AsyncConnection[Any], projection: str = READ_MODELS, *, policy: WindowPolicy | None = None
) -> ProjectionVersion:
    """Create the next version's schema and tables, projected with ``policy`` (default: the
    default policy); it is live at once if nothing is live yet."""
    policy = policy or WindowPolicy()
    async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(_VERSIONS_LOCK)
        await cur.execute(
            "SELECT coalesce(max(version), 0) + 1 AS next, bool_or(status = 'live') AS has_live "
            "FROM convlog.projection_versions WHERE projection = %s",
            [projection],
        )
        row = await cur.fetchone()
        assert row is not None
        version, status = row["next"], "building" if row["has_live"] else "live"
        schema = schema_name(projection, version)
        ddl = _DDL.read_text(encoding="utf-8")
        await cur.execute(sql.SQL(ddl).format(schema=sql.Identifier(schema)))
        await cur.execute(
            "INSERT INTO convlog.projection_versions (projection, version, schema_name, status, switched_at, "
            "window_max_turns, window_keep_turns) "
            "VALUES (%s, %s, %s, %s, CASE WHEN %s = 'live' THEN now() END, %s, %s)",
            [projection, version, schema, status, status, policy.max_turns, policy.keep_turns],
        )
        await ensure_event_index(conn, schema)  # a savepoint of this transaction
        if status == "live":  # the first: live from offset 0 everywhere
            await cur.execute(
                "INSERT INTO convlog.live_periods (projection, version, window_max_turns, window_keep_turns) "
                "VALUES (%s, %s, %s, %s)",
                [projection, version, policy.max_turns, policy.keep_turns],
            )
    return ProjectionVersion(projection, version, schema, status, policy)


async def versions(conn: AsyncConnection[Any], projection: str = READ_MODELS) -> list[ProjectionVersion]:
    async with conn.cursor() as cur:
        await cur.execute(
            "SELECT projection, version, schema_name, status, window_max_turns, window_keep_turns "
            "FROM convlog.projection_versions WHERE projection = %s ORDER BY version",
            [projection],
        )
        return [_version(row) for row in await cur.fetchall()]


async def live_version(conn: AsyncConnection[Any], projection: str = READ_MODELS) -> ProjectionVersion | None:
    return next((v for v in await versions(conn, projection) if v.status == "live"), None)


async def ensure_live_version(
    pool: AsyncConnectionPool[Any], projection: str = READ_MODELS, *, policy: WindowPolicy | None = None
) -> ProjectionVersion:
    """The live version; the first one, made with ``policy``, if there is none yet. Processes
    starting together on a fresh database (API instances, projectors) look again under
    :func:`create_version`'s lock, so one creates it and the others take it — not a second
    version left ``building``."""
    async with pool.connection() as conn:
        live = await live_version(conn, projection)
        if live is not None:
            return live
        async with conn.transaction():  # create_version's transaction nests in it (a savepoint)
            await conn.execute(_VERSIONS_LOCK)
            return await live_version(conn, projection) or await create_version(conn, projection, policy=policy)


async def version_of_schema(conn: AsyncConnection[Any], schema: str) -> ProjectionVersion:
    """The version whose tables ``schema`` holds (its window policy, say)."""
    async with conn.cursor() as cur:
        await cur.execute(
            "SELECT projection, version, schema_name, status, window_max_turns, window_keep_turns "
            "FROM convlog.projection_versions WHERE schema_name = %s",
            [schema],
        )
        row = await cur.fetchone()
    if row is None:
        raise ProjectionError(f"schema {schema} is no read-models version (convlog.projection_versions)")
    return _version(row)


async def switch(conn: AsyncConnection[Any], projection: str, version: int) -> None:
    """Make ``version`` live and retire the previous live one, atomically; record the hand-over
    (the retired version's positions now, refined by :func:`policy_served_at` while it exists)."""
    async with conn.transaction(), conn.cursor() as cur:
        await cur.execute(_VERSIONS_LOCK)
        await cur.execute(
            "UPDATE convlog.projection_versions SET status = 'retired' WHERE projection = %s AND status = 'live' "
            "RETURNING schema_name",
            [projection],
        )
        retired = await cur.fetchone()
        await cur.execute(
            "UPDATE convlog.projection_versions SET status = 'live', switched_at = now() "
            "WHERE projection = %s AND version = %s AND status <> 'live' "
            "RETURNING window_max_turns, window_keep_turns, schema_name",
            [projection, version],
        )
        made = await cur.fetchone()
        if made is None:
            raise ProjectionError(f"{projection} has no version {version} to switch to")
        previous = None if retired is None else retired[0]
        live_from = {} if previous is None else await _positions(conn, previous)
        await cur.execute(
            "INSERT INTO convlog.live_periods (projection, version, window_max_turns, window_keep_turns, "
            "previous_schema, live_from) VALUES (%s, %s, %s, %s, %s, %s)",
            [projection, version, made[0], made[1], previous, Jsonb({str(p): o for p, o in live_from.items()})],
        )
        # Delivered at the commit to every process LISTENing: APIs and projectors follow at once.
        await cur.execute("SELECT pg_notify(%s, %s)", [VERSIONS_CHANNEL, made[2]])


async def _positions(conn: AsyncConnection[Any], schema: str) -> dict[int, int]:
    cur = await conn.execute(sql.SQL("SELECT partition, next_offset FROM {}.positions").format(sql.Identifier(schema)))
    return {int(p): int(o) for p, o in await cur.fetchall()}


async def policy_served_at(
    conn: AsyncConnection[Any], partition: int, offset: int, projection: str = READ_MODELS
) -> WindowPolicy | None:
    """The window policy of the version that served the context as of the event at ``offset`` of
    ``partition``: the latest one to become live whose hand-over there is at most ``offset`` (the
    first one known, for an offset before every hand-over); None before any version was live."""
    async with conn.cursor() as cur:
        await cur.execute(
            "SELECT window_max_turns, window_keep_turns, (live_from ->> %s)::bigint, "
            "CASE WHEN to_regclass(quote_ident(previous_schema) || '.positions') IS NOT NULL THEN previous_schema END "
            "FROM convlog.live_periods WHERE projection = %s ORDER BY became_live_at DESC, seq DESC",
            [str(partition), projection],
        )
        periods = await cur.fetchall()
    for max_turns, keep_turns, recorded, kept in periods:
        live_from = recorded or 0
        if kept is not None:  # the replaced version is still there: its positions are the hand-over
            live_from = max(live_from, (await _positions(conn, kept)).get(partition, 0))
        if offset >= live_from:
            return WindowPolicy(max_turns, keep_turns)
    return WindowPolicy(periods[-1][0], periods[-1][1]) if periods else None


def served_policies(
    pool: AsyncConnectionPool[Any], fallback: WindowPolicy, projection: str = READ_MODELS
) -> Callable[[int, int], Awaitable[WindowPolicy]]:
    """:func:`policy_served_at` on connections of ``pool`` (``fallback`` before any version was
    live): what the API's and ``convlog replay``'s as-of contexts are rebuilt with."""

    async def policy_at(partition: int, offset: int) -> WindowPolicy:
        with pg_errors(f"look up the version live at offset {offset} of partition {partition}"):
            async with pool.connection() as conn:
                found = await policy_served_at(conn, partition, offset, projection)
        return fallback if found is None else found

    return policy_at


async def policy_of_version(
    conn: AsyncConnection[Any], version: int, projection: str = READ_MODELS
) -> WindowPolicy | None:
    """The window policy version ``version`` served contexts with (None: it was never live)."""
    cur = await conn.execute(
        "SELECT window_max_turns, window_keep_turns FROM convlog.live_periods "
        "WHERE projection = %s AND version = %s ORDER BY seq DESC LIMIT 1",
        [projection, version],
    )
    row = await cur.fetchone()
    return None if row is None else WindowPolicy(row[0], row[1])


def version_policies(
    pool: AsyncConnectionPool[Any], projection: str = READ_MODELS
) -> Callable[[int], Awaitable[WindowPolicy | None]]:
    """:func:`policy_of_version` on connections of ``pool``: the API's ``read_models_version``."""

    async def policy_of(version: int) -> WindowPolicy | None:
        with pg_errors(f"look up the window of read-models version {version}"):
            async with pool.connection() as conn:
                return await policy_of_version(conn, version, projection)

    return policy_of


async def keep_hand_over(conn: AsyncConnection[Any], projection: str, schema: str) -> None:
    """Before ``schema`` (a retired version) is dropped: copy its positions, final since the live
    projectors followed the switch, into the hand-over of the version that replaced it."""
    positions = await _positions(conn, schema)
    await conn.execute(
        "UPDATE convlog.live_periods SET live_from = %s WHERE projection = %s AND previous_schema = %s",
        [Jsonb({str(p): o for p, o in positions.items()}), projection, schema],
    )


async def checksums(
    conn: AsyncConnection[Any],
    schema: str,
    keys: Sequence[str] | None = None,
    *,
    by_value: bool = False,
    uncounted: Collection[str] = (),
    index_from: Mapping[int, int] | None = None,
) -> dict[tuple[str, str], str]:
    """md5 per (table, conversation) over the rows in key order; only ``keys`` when given.
    ``by_value``: JSON compared by value (see :func:`json_forms_differ`), else as stored text.
    ``uncounted``: see :func:`row_text`. ``index_from``: see :func:`compared_rows` (None: the
    event index is not compared, a version older than it may lack it)."""
    result: dict[tuple[str, str], str] = {}
    async with conn.cursor() as cur:
        for table, order in CHECKED_TABLES.items():
            if table == "event_index" and index_from is None:
                continue
            where, params = compared_rows(table, keys, index_from)
            query = sql.SQL(
                "SELECT conversation_key, md5(string_agg({row}, E'\\n' ORDER BY {order})) "
                "FROM {s}.{t} AS t {where} GROUP BY conversation_key"
            ).format(
                row=row_text(by_value=by_value, uncounted=uncounted, table=table),
                order=sql.SQL(order),
                s=sql.Identifier(schema),
                t=sql.Identifier(table),
                where=where,
            )
            await cur.execute(query, params)
            for key, digest in await cur.fetchall():
                result[(table, key)] = digest
    return result


def compared_rows(
    table: str, keys: Sequence[str] | None, index_from: Mapping[int, int] | None = None
) -> tuple[sql.Composable, list[Any]]:
    """The WHERE clause (and its parameters) of the rows of ``table`` (alias ``t``) compared:
    those of ``keys`` (all when None); for the event index only those at or past ``index_from``
    (per partition, from :func:`index_rows_from`), where both versions index every record."""
    clauses: list[sql.Composable] = []
    params: list[Any] = []
    if keys is not None:
        clauses.append(sql.SQL("t.conversation_key = ANY(%s)"))
        params.append(list(keys))
    if table == "event_index" and index_from:
        clauses.append(
            sql.SQL(
                't."offset" >= coalesce((SELECT f.start FROM unnest(%s::int[], %s::bigint[]) '
                "AS f(partition, start) WHERE f.partition = t.partition), 0)"
            )
        )
        params += [list(index_from), list(index_from.values())]
    return (sql.SQL("WHERE ") + sql.SQL(" AND ").join(clauses) if clauses else sql.SQL("")), params


async def index_rows_from(conn: AsyncConnection[Any], *schemas: str) -> dict[int, int] | None:
    """Per partition, the offset from which every one of ``schemas`` indexes all records: a
    version made before the event index existed indexes from its positions then
    (``event_index_from``); compared from the latest such start. None when one of them has no
    event index yet (no projector ran on it since): nothing to compare."""
    starts: dict[int, int] = {}
    for schema in schemas:
        cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", [f'"{schema}".event_index_from'])
        if not (row := await cur.fetchone()) or not row[0]:
            return None
        cur = await conn.execute(
            sql.SQL("SELECT partition, from_offset FROM {}.event_index_from").format(sql.Identifier(schema))
        )
        for partition, start in await cur.fetchall():
            starts[partition] = max(start, starts.get(partition, 0))
    return starts


_COUNT_COLUMNS = {
    "o200k_base": ("tokens_o200k", "reasoning_tokens_o200k"),
    "cl100k_base": ("tokens_cl100k", "reasoning_tokens_cl100k"),
}


def row_text(*, by_value: bool, uncounted: Collection[str] = (), table: str = "transcript") -> sql.Composable:
    """A row ``t`` as text: as stored, or with its JSON as jsonb (by value: key order aside).

    ``uncounted``: encodings ``CONVLOG_TOKEN_ENCODINGS`` does not name, whose transcript counts
    are left out (as NULL, every other column as stored). A replay stores none of them, while
    the rows a version took before the setting dropped one keep theirs (contexts use them), so
    comparing them would report every such row."""
    row: sql.Composable = sql.SQL("t")
    nulls = {column: None for encoding in uncounted for column in _COUNT_COLUMNS[encoding]}
    if nulls and table == "transcript":
        row = sql.SQL("jsonb_populate_record(t, {}::jsonb)").format(sql.Literal(json.dumps(nulls, sort_keys=True)))
    return sql.SQL("to_jsonb({})::text" if by_value else "{}::text").format(row)


async def stores_jsonb(conn: AsyncConnection[Any], schema: str) -> bool:
    """Whether the version stores the transcript's JSON as jsonb: made before read_models.sql
    chose json (which keeps the text as written, key order included)."""
    cur = await conn.execute(
        "SELECT data_type FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = 'transcript' AND column_name = 'content'",
        [schema],
    )
    row = await cur.fetchone()
    return row is not None and row[0] == "jsonb"


async def json_forms_differ(conn: AsyncConnection[Any], schema_a: str, schema_b: str) -> bool:
    """One version stores jsonb, the other json: their rows differ in JSON key order alone, so
    they are compared by value. Versions of one form are compared as stored, byte for byte."""
    return await stores_jsonb(conn, schema_a) != await stores_jsonb(conn, schema_b)


async def compare(
    conn: AsyncConnection[Any], schema_a: str, schema_b: str, *, uncounted: Collection[str] = ()
) -> list[tuple[str, str]]:
    """The (table, conversation) pairs whose rows differ between two versions, sorted
    (``uncounted``: see :func:`row_text`)."""
    by_value, index_from = (
        await json_forms_differ(conn, schema_a, schema_b),
        await index_rows_from(conn, schema_a, schema_b),
    )
    a = await checksums(conn, schema_a, by_value=by_value, uncounted=uncounted, index_from=index_from)
    b = await checksums(conn, schema_b, by_value=by_value, uncounted=uncounted, index_from=index_from)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
