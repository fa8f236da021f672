"""Ending a stalled projector session that blocks another projector.

A projector frozen mid-batch (SIGSTOP, a paused VM, a long GC pause, a network partition) keeps
the row locks of its positions (the batch's ``FOR UPDATE``); the consumer group gives its
partitions to another member, whose first batch waits on those locks. Postgres ends a session
idle inside a transaction by itself (``idle_in_transaction_session_timeout``, one of the
projector's :class:`~pgstore.pool.SessionLimits`), but not one frozen inside a ``COPY ... FROM
STDIN``: that session is ``active``, waiting for its client's data (wait event ``ClientRead``),
and neither ``statement_timeout`` nor ``transaction_timeout`` interrupts that wait (checked on
Postgres 18), while TCP keepalives do not help when the process is only stopped (its kernel
still answers them).

So each projector looks, every ``interval_s``, for sessions of the projectors' application names
that block a session of those names waiting for a lock, and have themselves waited on their
client (idle in a transaction, or inside a COPY) for longer than ``stalled_s``, and ends them
(``pg_terminate_backend``: the same role may end its own sessions). That is correct whatever the
ended session's process is doing: its transaction rolls back, and if the process is alive it
retries and the positions fence refuses its batch, as for any zombie. A healthy projector's
transaction waits on its client for milliseconds, so ``stalled_s`` (the idle-in-transaction
timeout) never ends one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import structlog

from pgstore.pool import PgPool, pg_errors

__all__ = ["end_stalled_blockers", "watch_stalled_blockers"]

log = structlog.get_logger(__name__)

# The blockers of this database's waiting sessions of some applications, stalled on their client.
# pg_blocking_pids is evaluated only for the sessions waiting on a lock (its cost is the lock
# manager's, paid only then).
_STALLED_BLOCKERS = """
SELECT DISTINCT b.pid, b.state, extract(epoch FROM now() - b.state_change)::float8
FROM pg_stat_activity w
CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS blocker(pid)
JOIN pg_stat_activity b ON b.pid = blocker.pid
WHERE w.datname = current_database() AND w.application_name = ANY(%(apps)s) AND w.wait_event_type = 'Lock'
  AND b.application_name = ANY(%(apps)s) AND b.xact_start IS NOT NULL
  AND (b.state LIKE 'idle in transaction%%' OR (b.state = 'active' AND b.wait_event = 'ClientRead'))
  AND b.state_change < clock_timestamp() - make_interval(secs => %(stalled_s)s)
"""


async def end_stalled_blockers(pool: PgPool, *, applications: Sequence[str], stalled_s: float) -> list[int]:
    """End the stalled sessions (see the module) of ``applications`` (application names) that
    block a session of theirs; their backend pids. Raises
    :class:`~projectors.errors.StoreUnavailableError` and the like."""
    with pg_errors("ending stalled sessions"):
        async with pool.connection() as conn:
            params = {"apps": list(applications), "stalled_s": stalled_s}
            rows = await (await conn.execute(_STALLED_BLOCKERS, params)).fetchall()
            ended = []
            for pid, state, stalled_for in rows:
                await conn.execute("SELECT pg_terminate_backend(%s)", [pid])
                log.warning(
                    "projector.ended_stalled_session",
                    pid=pid,
                    state=state,
                    stalled_s=round(stalled_for, 1),
                    hint="it held locks another projector waits for",
                )
                ended.append(pid)
            return ended


async def watch_stalled_blockers(
    pool: PgPool, stop: asyncio.Event, *, applications: Sequence[str], stalled_s: float, interval_s: float = 1.0
) -> None:
    """:func:`end_stalled_blockers` every ``interval_s`` until ``stop`` is set; a failed look
    (Postgres unavailable) is logged and tried again."""
    while not stop.is_set():
        try:
            await end_stalled_blockers(pool, applications=applications, stalled_s=stalled_s)
        except Exception as e:  # noqa: BLE001 - an outage must not end the projector; the next look retries
            log.debug("projector.stalled_session_check_failed", error=str(e))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
