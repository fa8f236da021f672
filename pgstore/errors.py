"""Driver errors leaving a block converted, for blocks that do more than talk to Postgres."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from pgstore.pool import convert_pg_error


@contextmanager
def driver_errors(action: str) -> Iterator[None]:
    """As :func:`pgstore.pool.pg_errors`, but only the driver's own errors: a block that also
    writes elsewhere (an export to a closed pipe raises ``BrokenPipeError``, a ``ConnectionError``)
    must not report that as Postgres unavailable."""
    try:
        yield
    except psycopg.Error as e:
        raise convert_pg_error(e, action=action) from e
