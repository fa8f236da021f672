"""The read-models versions (``convlog.projection_versions``) as the operators' jobs use them:
each call on a connection of its own from the pool."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pgstore.parked_rows import skip_decisions
from pgstore.pool import PgPool
from pgstore.schemas import drop_schema_in
from pgstore.versions import (
    READ_MODELS,
    ProjectionVersion,
    create_version,
    keep_hand_over,
    live_version,
    policy_of_version,
    switch,
    version_of_schema,
    versions,
)
from projectors.window import WindowPolicy


@dataclass(frozen=True, slots=True)
class StoreInputs:
    """What a store writing a version's schema needs from the registry."""

    policy: WindowPolicy  # the version's own window policy (a resumed one keeps its)
    skips: dict[tuple[int, int], str]  # records an operator skipped in the live version: (partition, offset) -> reason


async def live(pool: PgPool, projection: str = READ_MODELS) -> ProjectionVersion | None:
    async with pool.connection() as conn:
        return await live_version(conn, projection)


async def known_versions(pool: PgPool, projection: str = READ_MODELS) -> list[ProjectionVersion]:
    """Every version of ``projection``, retired ones too, by version number."""
    async with pool.connection() as conn:
        return await versions(conn, projection)


async def served_policy(pool: PgPool, version: int, projection: str = READ_MODELS) -> WindowPolicy | None:
    """The window policy ``version`` served contexts with (None: it was never live)."""
    async with pool.connection() as conn:
        return await policy_of_version(conn, version, projection)


async def new_version(pool: PgPool, projection: str, *, policy: WindowPolicy) -> ProjectionVersion:
    async with pool.connection() as conn:
        return await create_version(conn, projection, policy=policy)


async def make_live(pool: PgPool, projection: str, version: int) -> None:
    """Switch: ``version`` live, the live one retired, in one transaction."""
    async with pool.connection() as conn:
        await switch(conn, projection, version)


async def store_inputs(pool: PgPool, schema: str) -> StoreInputs:
    """The window policy of the version ``schema`` holds and the skip decisions of the live
    version (none when ``schema`` is the live version's own)."""
    async with pool.connection() as conn:
        current = await live_version(conn)
        skips = await skip_decisions(conn, current.schema) if current is not None and current.schema != schema else {}
        target = await version_of_schema(conn, schema)
    return StoreInputs(target.policy, skips)


async def drop_version(
    pool: PgPool, projection: str, version: int, *, check: Callable[[str | None, str | None], None]
) -> tuple[str, str]:
    """Drop ``version``'s schema and its registry row; returns (schema, status it had).

    ``check(schema, status)`` (both None: no such version) raises to refuse; it runs under the
    lock :func:`~pgstore.versions.create_version` takes, so that no version is created or
    switched meanwhile. A retired version first hands its final positions to the version that
    replaced it (``as_of`` needs them)."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('convlog.projection_versions'))")
        cur = await conn.execute(
            "SELECT schema_name, status FROM convlog.projection_versions "
            "WHERE projection = %s AND version = %s FOR UPDATE",
            [projection, version],
        )
        row = await cur.fetchone()
        check(*(row or (None, None)))
        assert row is not None  # check refuses a missing version
        schema, status = str(row[0]), str(row[1])
        if status == "retired":
            await keep_hand_over(conn, projection, schema)
        await drop_schema_in(conn, schema)
        await conn.execute(
            "DELETE FROM convlog.projection_versions WHERE projection = %s AND version = %s", [projection, version]
        )
    return schema, status
