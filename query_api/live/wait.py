"""The one wait for the projection: until the read models applied an offset of a partition,
bounded, woken by the projectors' commits where this process hears them (read-your-writes, and
the orphan check of an append, which waits for the log's end as of now)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from events.log import EventLog
from projectors.positions_watch import PositionsWatch, next_look, read_until_passed
from query_api.as_of import OffsetBeyondLogEndError, refuse_beyond_log_end
from query_api.live.errors import NotCaughtUpError
from query_api.ports import ContextInputs, ReadModels


async def wait_for_projection(
    reads: ReadModels,
    log: EventLog,
    partition: int,
    offset: int,
    *,
    timeout_s: float,
    watch: PositionsWatch | None = None,
    trust_hint: bool = False,
    follow: Callable[[], Awaitable[ReadModels]] | None = None,
    field: str | None = "min_offset",
) -> bool:
    """Wait (bounded) until the projection applied ``offset``; :class:`NotCaughtUpError` when
    it did not within ``timeout_s``. An offset the log does not hold can never be reached:
    :class:`OffsetBeyondLogEndError` (naming ``field``) at once, instead of polling Postgres for
    the whole wait (the log's end is asked only when the projection is not there yet; never
    with ``field`` None, for an offset read from the log's end itself). With
    ``watch`` (told the commits of this process's projector, and of every projector while its
    Postgres listener is up) the wait ends at the commit that passes ``offset``; the read
    models confirm it, so a hint never serves a version that lacks it — with ``trust_hint``,
    the caller does, from the context it reads next (:func:`reflects`: one round trip fewer),
    and True says the wait ended on the watch's word alone. With ``follow`` (the live version's
    reads), each look after the first reads the positions of the version live then."""
    seen = watch.commits if watch is not None else 0
    # A listening watch that says the partition is behind saves the read that would say so too.
    skip_first_read = trust_hint and watch is not None and watch.behind(partition, offset)
    if not skip_first_read and await reads.projection_position(partition) > offset:
        return False
    if field is not None:
        await held(log, partition, offset, field)
    deadline = asyncio.get_running_loop().time() + timeout_s
    if trust_hint and watch is not None:
        await next_look(watch, partition, offset, timeout_s, seen=seen)
        if watch.passed(partition, offset):
            return True

    async def read_position() -> int:
        return await (reads if follow is None else await follow()).projection_position(partition)

    position = await read_until_passed(read_position, watch, partition, offset, deadline=deadline)
    if position <= offset:
        # The projectors may run in other processes (API-only instances): say how far they got.
        raise NotCaughtUpError(
            f"the read models have not reached offset {offset} of partition {partition} within "
            f"{timeout_s:g} s (the projection's next offset there is {position}): the projectors "
            "are behind or not running; retry later",
            partition=partition,
            projected=position,
        )
    return False


async def held(log: EventLog, partition: int, offset: int, field: str) -> None:
    """:class:`OffsetBeyondLogEndError` (naming ``field``) for an offset the log does not hold yet."""
    try:
        await refuse_beyond_log_end(log, partition, offset)
    except OffsetBeyondLogEndError as e:
        raise OffsetBeyondLogEndError(e.partition, offset, field=field) from e


def reflects(inputs: ContextInputs, partition: int, offset: int) -> bool:
    """Whether these read models (one snapshot) hold ``offset`` of ``partition`` for sure: the
    conversation's own last event is at or past it (positions and rows commit together)."""
    return inputs.partition == partition and inputs.last_offset >= offset
