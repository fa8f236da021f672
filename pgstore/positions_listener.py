"""The API's ear on every projector's commits: one Postgres connection ``LISTEN``ing on the
live version's positions channel (the projection store ``NOTIFY``s a batch's positions in its
transaction, delivered at its commit), feeding a :class:`~projectors.positions_watch.PositionsWatch`.

It also LISTENs on the switches of the live version (``convlog rebuild --switch`` NOTIFYs
them in its transaction): at the commit it tells ``on_switch`` (the API's live reads look the
version up again, the projector follows) and listens on the new version's channel, so no
read-your-writes request waits on a retired version's positions.

While it is down (Postgres restarting, say) the watch says so and read-your-writes waits poll
again; it reconnects with backoff, and tells ``on_switch`` then too (a switch made meanwhile
was not heard).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import psycopg
import structlog
from psycopg import sql

from events.errors import ConvlogError
from pgstore.versions import VERSIONS_CHANNEL
from projectors.positions_watch import PositionsWatch, parse_positions, positions_channel

log = structlog.get_logger(__name__)


class PositionsListener:
    """``run`` until ``stop``: LISTEN on ``live_schema()``'s channel, tell ``watch`` every payload,
    and ``on_switch`` every switch of the live version. Without a watch (``convlog project``),
    only the switches."""

    def __init__(
        self,
        url: str,
        watch: PositionsWatch | None,
        live_schema: Callable[[], Awaitable[str]] | None = None,
        *,
        on_switch: Callable[[], None] = lambda: None,
        check_s: float = 1.0,
        retry_max_s: float = 5.0,
    ) -> None:
        self._url, self._watch, self._live_schema, self._on_switch = url, watch, live_schema, on_switch
        self._check_s, self._retry_max_s = check_s, retry_max_s  # check_s: how often the live version is looked up

    async def run(self, stop: asyncio.Event) -> None:
        delay = 0.2
        while not stop.is_set():
            try:
                await self._listen(stop)
                delay = 0.2
            except (psycopg.Error, OSError, ConvlogError) as e:
                log.warning("positions_listener.down", error=str(e), retry_in_s=delay)
            finally:
                if self._watch is not None:
                    self._watch.listening = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(delay * 2, self._retry_max_s)

    async def _listen(self, stop: asyncio.Event) -> None:
        async with await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, application_name="convlog-positions"
        ) as conn:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(VERSIONS_CHANNEL)))
            self._on_switch()  # one made while this was not listening was not heard
            channel: str | None = None
            while not stop.is_set():
                if self._watch is not None and self._live_schema is not None:
                    channel = await self._follow(conn, channel, self._watch, self._live_schema)
                async for notify in conn.notifies(timeout=self._check_s):
                    if notify.channel == VERSIONS_CHANNEL:
                        log.info("positions_listener.switch_heard", schema=notify.payload)
                        self._on_switch()
                        break  # to listen on the new version's channel
                    if self._watch is not None:
                        self._watch.committed(parse_positions(notify.payload))

    @staticmethod
    async def _follow(
        conn: psycopg.AsyncConnection[object],
        channel: str | None,
        watch: PositionsWatch,
        live_schema: Callable[[], Awaitable[str]],
    ) -> str:
        """LISTEN on the live version's positions channel instead of ``channel``; the one now."""
        live = positions_channel(await live_schema())
        if live != channel:
            if channel is not None:
                await conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(channel)))
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(live)))
            watch.forget()  # commits made while it was not listening were not heard
            watch.listening = True
            log.info("positions_listener.listening", channel=live)
        return live
