"""The first read-models version when several processes start at once on a fresh database (a
deployment's API instances and projectors): one version, live, and every process on it."""

from __future__ import annotations

import asyncio

import pytest

from pgstore.migrate import migrate
from pgstore.pool import open_pool
from pgstore.versions import ensure_live_version, versions
from tests.projection_support import temporary_database

pytestmark = pytest.mark.postgres


async def test_processes_starting_together_share_one_live_first_version(pg_admin_url: str) -> None:
    async with temporary_database(pg_admin_url) as url:
        await migrate(url)
        pools = [await open_pool(url, max_size=1, name=f"start-{i}") for i in range(4)]
        try:
            chosen = await asyncio.gather(*(ensure_live_version(pool) for pool in pools))
            async with pools[0].connection() as conn:
                made = await versions(conn)
        finally:
            for pool in pools:
                await pool.close()
    assert [(v.version, v.status) for v in made] == [(1, "live")]  # not a second one left "building"
    assert {v.schema for v in chosen} == {made[0].schema}
