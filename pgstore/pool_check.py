"""Checking pooled connections only when they may have gone stale.

psycopg_pool's ``check_connection`` costs a round trip on every checkout: on the context path
that is one more round trip than the answer needs (the context reads are one pipelined round
trip). A connection handed out a moment ago was in use then (requests and projection batches
hold one for milliseconds, and the pool discards one that comes back broken), so
:class:`IdleCheck` checks only connections last handed out more than ``fresh_s`` ago. One that
broke inside that window (Postgres restarted within the second) fails its first statement with
a retriable error, and the pool discards it on return.

Not the pool's ``reset`` hook to note returns: with one set, psycopg_pool returns every
connection through a worker task, which delays the next checkout.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

import psycopg
import psycopg_pool


class IdleCheck:
    """A pool's ``check`` callback that skips the round trip for recently used connections."""

    def __init__(self, fresh_s: float = 1.0) -> None:
        self._fresh_s = fresh_s
        self._handed_out: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = weakref.WeakKeyDictionary()

    async def __call__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        now = time.monotonic()
        last = self._handed_out.get(conn)
        if last is None or now - last >= self._fresh_s or conn.broken:
            await psycopg_pool.AsyncConnectionPool.check_connection(conn)
        self._handed_out[conn] = now
