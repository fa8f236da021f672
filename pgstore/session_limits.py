"""What a pool's Postgres sessions bound for themselves, set once per new connection.

TCP keepalives at both ends of every connection, and for pools that want them (the projector's)
bounds on lock waits, statements and idle transactions: a frozen client's locks are released and
a waiter fails retriably instead of hanging (see :mod:`pgstore.stalled_sessions` for the one
stall no Postgres timeout ends).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

__all__ = ["KEEPALIVES_COUNT", "KEEPALIVES_IDLE_S", "KEEPALIVES_INTERVAL_S", "ConfigureSession", "SessionLimits"]

# TCP keepalives on every connection, both ends: a peer gone silent (a network partition, a
# machine powered off) is found after idle + interval * count = 25 s instead of the kernel's
# two hours. The client's (libpq) end the driver's wait; the server's (its tcp_keepalives_*
# settings, per session) end the backend of a client that vanished, releasing its locks.
# A URL's own keepalives_* parameters win over these.
KEEPALIVES_IDLE_S, KEEPALIVES_INTERVAL_S, KEEPALIVES_COUNT = 10, 5, 3


@dataclass(frozen=True, slots=True)
class SessionLimits:
    """Bounds a pool's sessions put on themselves (seconds; None or 0: Postgres' default, no bound).

    ``lock_timeout_s``: a statement waiting that long for a lock fails (SQLSTATE 55P03, retriable).
    ``statement_timeout_s``: a statement running that long is cancelled (57014, retriable).
    ``idle_in_transaction_timeout_s``: Postgres ends a session idle that long inside a
    transaction (a frozen client), so its locks are released.
    """

    lock_timeout_s: float | None = None
    statement_timeout_s: float | None = None
    idle_in_transaction_timeout_s: float | None = None

    def server_settings(self) -> dict[str, str]:
        """The session settings (name -> value in milliseconds or seconds) these limits mean,
        with the server's end of the TCP keepalives."""
        out = {
            "tcp_keepalives_idle": str(KEEPALIVES_IDLE_S),
            "tcp_keepalives_interval": str(KEEPALIVES_INTERVAL_S),
            "tcp_keepalives_count": str(KEEPALIVES_COUNT),
        }
        for name, seconds in (
            ("lock_timeout", self.lock_timeout_s),
            ("statement_timeout", self.statement_timeout_s),
            ("idle_in_transaction_session_timeout", self.idle_in_transaction_timeout_s),
        ):
            if seconds:
                out[name] = str(max(1, round(seconds * 1000)))
        return out


class ConfigureSession:
    """The pool's ``configure`` callback: one round trip per new connection sets its limits.
    ``set_config`` rather than the startup packet's ``options``: poolers such as PgBouncer
    refuse unknown startup parameters."""

    def __init__(self, settings: dict[str, str]) -> None:
        self._names, self._values = list(settings), list(settings.values())

    async def __call__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(
            "SELECT set_config(name, value, false) FROM unnest(%s::text[], %s::text[]) AS s(name, value)",
            [self._names, self._values],
        )
        await conn.commit()  # the pool takes only idle connections
