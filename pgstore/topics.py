"""A projection version belongs to the topic it was built from.

Its positions are offsets of that topic. On another topic — ``CONVLOG_TOPIC`` changed, or the
topic deleted and created anew under the same database — they are meaningless, so a projector
(or a rebuild) started on a version recorded with another topic refuses at once, naming both
topics and what to do, instead of failing later (or silently skipping records of a longer topic).
The first start on a version records its topic (``convlog.projection_versions.topic``, migration
0003): a new version when it is created, a version from before that migration on its next start.
"""

from __future__ import annotations

import structlog

from pgstore.pool import PgPool, pg_errors
from pgstore.versions import ProjectionVersion
from projectors.errors import ProjectionError

log = structlog.get_logger(__name__)


class TopicMismatchError(ProjectionError):
    """The projection version was built from another topic than the configured one."""

    code = "topic_mismatch"


async def claim_topic(pool: PgPool, version: ProjectionVersion, topic: str) -> None:
    """Record ``topic`` as the one ``version`` reads unless it has one; refuse another
    (:class:`TopicMismatchError`, not retriable)."""
    with pg_errors(f"record the topic of {version.schema}"):
        async with pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "SELECT topic FROM convlog.projection_versions WHERE projection = %s AND version = %s FOR UPDATE",
                [version.projection, version.version],
            )
            row = await cur.fetchone()
            if row is not None and row[0] is None:
                await conn.execute(
                    "UPDATE convlog.projection_versions SET topic = %s WHERE projection = %s AND version = %s",
                    [topic, version.projection, version.version],
                )
                log.info("projection.topic_recorded", schema=version.schema, topic=topic)
                row = (topic,)
    if row is None:
        raise ProjectionError(f"{version.projection} version {version.version} does not exist (dropped meanwhile?)")
    recorded = str(row[0])
    if recorded != topic:
        raise TopicMismatchError(
            f"{version.projection} version {version.version} ({version.schema}, {version.status}) was built from "
            f"topic {recorded!r}, but CONVLOG_TOPIC is {topic!r}: its positions are offsets of {recorded!r}. "
            f"Set CONVLOG_TOPIC={recorded} to go on with it. To project {topic!r} instead, give it a database of "
            f"its own (CONVLOG_DATABASE_URL); or, if {topic!r} holds the same events (a mirror), build a version "
            f"from it: CONVLOG_TOPIC={topic} convlog rebuild {version.projection} --new --verify --switch"
        )
