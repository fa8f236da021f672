"""``convlog rebuild`` throughput next to the necessary-work ceiling of the same records, same run.

1. Writes N message events over C conversations to a fresh topic (not timed; as bench/project.py).
2. The necessary-work ceiling, as in bench/project.py: raw aiokafka consume + fastavro decode +
   one ``o200k_base`` count per message text + COPY into tables with the same indexes, each
   timed alone.
3. Rebuild: the ``convlog rebuild`` code path (group-less Kafka reader, projector, COPY, one
   transaction per batch, progress bar) builds a new version from offset 0 beside an empty live
   one, in a temporary database that is dropped afterwards — once with one worker process and
   once with two.

Ends with one markdown table ``| figure | value | target | met |`` (docs/performance.md).

    CONVLOG_KAFKA_BOOTSTRAP=... CONVLOG_DATABASE_URL=... python bench/rebuild.py [--events N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from cpu_share import GROUPS, CpuShares, listening_pid, parent_pid
from project import Ceiling, fresh_topic, necessary_work, print_cpu_budget, print_table, raw_consume, services_from_env
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from convlog.ops.rebuild_protocol import READY
from convlog.ops.rebuild_sharing import start_worker
from convlog.ops.rebuilding import RebuildOptions, rebuild
from convlog.settings import Settings
from pgstore.migrate import migrate
from pgstore.pool import open_pool
from pgstore.versions import create_version, versions


@asynccontextmanager
async def scratch_database(admin_url: str) -> AsyncIterator[str]:
    """The URL of a new, migrated database, dropped on exit."""
    database = f"convlog_bench_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    try:
        url = make_conninfo(admin_url, dbname=database)
        await migrate(url)
        yield url
    finally:
        async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))


async def timed_rebuild(
    bootstrap: str, topic: str, admin_url: str, batch_size: int, workers: int
) -> tuple[float, CpuShares]:
    """(wall seconds, where the CPU went) of one ``convlog rebuild`` of the topic."""
    async with scratch_database(admin_url) as url:
        pool = await open_pool(url, max_size=1, name="bench")
        async with pool.connection() as conn:
            await create_version(conn)  # the (empty) live version the rebuild builds beside
            cur = await conn.execute("SELECT pg_backend_pid()")
            row = await cur.fetchone()
            await conn.commit()
            postmaster = parent_pid(row[0]) if row is not None else None  # while that backend lives
        await pool.close()
        shares = CpuShares(conninfo_to_dict(url)["dbname"], postmaster, listening_pid(kafka_port(bootstrap)))
        settings = Settings(kafka_bootstrap=bootstrap, database_url=url, topic=topic)
        shares.start()
        started = time.perf_counter()
        try:
            code = await rebuild(settings, RebuildOptions(batch_size=batch_size, workers=workers), asyncio.Event())
        finally:
            elapsed = time.perf_counter() - started
            shares.stop()
        assert code == 0, code
        if workers > 1:
            probe = CpuShares(shares.database, postmaster, shares.kafka)
            probe.start()
            wall, cpu = await worker_start(settings)
            probe.stop()
            shares.worker_start = (wall, cpu, probe.seconds["Kafka broker"], probe.seconds["Postgres backends"])
        return elapsed, shares


async def worker_start(settings: Settings) -> tuple[float, float]:
    """(wall, CPU seconds) a rebuild worker process takes to be ready (forked: its connections and
    store; started afresh where it cannot fork: imports and token tables too), as each worker but
    the first pays before it takes any partition — started the way ``convlog rebuild`` starts one."""
    async with await psycopg.AsyncConnection.connect(settings.database_url) as conn:
        building = [v for v in await versions(conn) if v.status == "building"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = await start_worker(building[-1].schema, [], settings.subprocess_env())
    assert proc.stdin is not None
    assert proc.stdout is not None
    while (line := await proc.stdout.readline()) and line.decode().strip() != READY:
        pass
    wall = time.perf_counter() - started
    proc.stdin.close()  # no share: it exits
    await proc.stdout.read()
    assert await proc.wait() == 0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def kafka_port(bootstrap: str) -> int:
    return int(bootstrap.split(",", maxsplit=1)[0].rsplit(":", 1)[1])


async def measure_ceiling(bootstrap: str, topic: str, admin_url: str, n: int) -> Ceiling:
    consume_s, consume_cpu_s, raw_records = await raw_consume(bootstrap, topic, n)
    async with scratch_database(admin_url) as url:
        pool = await open_pool(url, max_size=1, name="bench")
        try:
            return await necessary_work(pool, raw_records, consume_s, consume_cpu_s)
        finally:
            await pool.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=5000)
    args = parser.parse_args()
    bootstrap, admin_url = services_from_env()
    topic = await fresh_topic(bootstrap, "rebuild", args.events, args.conversations)
    ceiling = await measure_ceiling(bootstrap, topic, admin_url, args.events)
    one_s, one_cpu = await timed_rebuild(bootstrap, topic, admin_url, args.batch_size, 1)
    two_s, two_cpu = await timed_rebuild(bootstrap, topic, admin_url, args.batch_size, 2)

    n = args.events
    one, two = n / one_s, n / two_s
    ceiling.print()
    print(f"convlog rebuild, 1 worker   {one:>10,.0f} events/s  ({one_s:.2f} s, batch {args.batch_size})")
    print(f"convlog rebuild, 2 workers  {two:>10,.0f} events/s  ({two_s:.2f} s)")
    print_cpu_budget(n, ceiling.parts(), ("rebuild, 1 worker", one_s))
    cores = os.cpu_count() or 1
    print_cpu_shares(n, cores, {"1 worker": one_cpu, "2 workers": two_cpu})
    # With the CPU one event costs in the 1-worker run, the cores not taken by other processes
    # allow at most this speedup, however many workers: the ceiling of "2 workers / 1 worker".
    free = cores - two_cpu.cores("other")
    bound = free / one_cpu.cores_ours if one_cpu.cores_ours else float("inf")
    start_wall, start_cpu, start_kafka_cpu, start_pg_cpu = two_cpu.worker_start
    # ... and, paying one worker's start on top of the 1-worker run's CPU, at most this. (Without
    # the broker's CPU during that start: the broker serves every client on it, its figure is an
    # upper bound on a shared machine.)
    bound_started = one_s * free / (one_cpu.ours_s + start_cpu + start_pg_cpu)
    print_table(
        [
            ("necessary-work ceiling", f"{ceiling.rate:,.0f} events/s", "", None),
            ("rebuild, 1 worker", f"{one:,.0f} events/s", "", None),
            ("rebuild, 2 workers", f"{two:,.0f} events/s", "", None),
            ("1 worker / ceiling", f"{one / ceiling.rate:.2f}", ">= 0.50", one / ceiling.rate >= 0.5),
            ("2 workers / 1 worker", f"{two / one:.2f}", ">= 1.30", two / one >= 1.3),
            ("CPU per event, 1 worker: workers / Postgres / Kafka", one_cpu.per_event(n), "", None),
            ("CPU per event, 2 workers: workers / Postgres / Kafka", two_cpu.per_event(n), "", None),
            (
                f"cores busy of {cores}, 1 worker run: ours / other processes",
                f"{one_cpu.cores_ours:.2f} / {one_cpu.cores('other'):.2f}",
                "",
                None,
            ),
            (
                f"cores busy of {cores}, 2 workers run: ours / other processes",
                f"{two_cpu.cores_ours:.2f} / {two_cpu.cores('other'):.2f}",
                "",
                None,
            ),
            (
                "CPU available to the second worker (cores idle in the 1-worker run)",
                f"{max(0.0, cores - one_cpu.cores_ours - one_cpu.cores('other')):.2f}",
                "",
                None,
            ),
            ("2 workers / 1 worker the free cores allow at 1-worker CPU per event", f"{bound:.2f}", "", None),
            (
                "a worker process's start (forked: connections, store): wall / CPU of it / Kafka (shared) / Postgres",
                f"{start_wall:.2f} s / {start_cpu:.2f} / {start_kafka_cpu:.2f} / {start_pg_cpu:.2f} s",
                "",
                None,
            ),
            ("2 workers / 1 worker the free cores allow, that start paid", f"{bound_started:.2f}", "", None),
        ]
    )


def print_cpu_shares(n: int, cores: int, runs: dict[str, CpuShares]) -> None:
    """Per run: cores each group kept busy, and CPU microseconds per event."""
    print(f"where the CPU went ({cores} cores), cores busy over each run / us per event:")
    print(f"  {'':<22}" + "".join(f"{name:>22}" for name in runs))
    for group in GROUPS:
        cells = "".join(f"{r.cores(group):>12.2f} {r.seconds[group] / n * 1e6:>7.1f} us" for r in runs.values())
        print(f"  {group:<22}{cells}")


if __name__ == "__main__":
    asyncio.run(main())
