"""The hand-over of a switch is where the replaced version's live projection stopped, not where
it was at the switch: the live projectors go on projecting (and the API serving) the old version
until they see the switch (``CONVLOG_VERSION_POLL_S``), so contexts served in those seconds are
rebuilt with the old window, those served after with the new one — and still after
``convlog drop`` of the old version. Embedded log, real Postgres, the projector in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from convlog.ops.rebuilding import drop
from convlog.settings import Settings
from events.event_types import SummaryRecorded
from events.keys import ConversationKey
from events.log import EventLog
from events.producer import ConversationProducer
from pgstore.reads import PostgresReadModels
from pgstore.versions import ProjectionVersion, create_version, served_policies, switch
from projectors.tokens import model_spec
from projectors.window import WindowPolicy
from query_api.as_of import PolicyAt
from query_api.context_types import ContextRequest
from query_api.live import assemble_live
from query_api.served import context_as_of, context_body
from tests.projection_support import Projection, project_all

pytestmark = pytest.mark.postgres

KEY = ConversationKey("acme", "u1", "c1")
SPEC = model_spec("gpt-4o", default_encoding="o200k_base")
REQUEST = ContextRequest("gpt-4o", 100_000, 0, 0, "omit", 2)
NEW = WindowPolicy(8, 6)  # the rebuilt version's; the first one has the default 12 -> 4


async def _ask(producer: ConversationProducer, questions: range) -> int:
    """One turn per question, then a summary through the last (a context starts at its window)."""
    for i in questions:
        await producer.append_user(KEY, f"question {i}", message_id=f"q{i}")
    summary = SummaryRecorded(f"s{questions[-1]}", "earlier questions", f"q{questions[-1]}", "test-model", "v1")
    return (await producer.append(KEY, summary, event_id=f"s{questions[-1]}")).offset


async def _project(projection: Projection, log: EventLog, version: ProjectionVersion) -> None:
    await project_all(log, projection.store(schema=version.schema, policy=version.policy))


async def _served(projection: Projection, version: ProjectionVersion) -> bytes:
    """The context the API serves from ``version``'s read models, as its route does."""
    ctx, inputs = await assemble_live(PostgresReadModels(projection.pool, schema=version.schema), KEY, SPEC, REQUEST)
    return json.dumps(context_body(ctx, inputs, SPEC)).encode()


async def _as_of(log: EventLog, offset: int, policy: WindowPolicy | PolicyAt) -> bytes:
    served = await context_as_of(
        log, KEY, offset, request=REQUEST, spec=SPEC, policy=policy, max_event_bytes=1 << 20, start_offset=0
    )
    assert served is not None
    return json.dumps(context_body(*served, SPEC)).encode()


def _questions(body: bytes) -> list[str]:
    return [m["content"] for m in json.loads(body)["messages"] if m["role"] == "user"]


async def test_contexts_the_old_version_served_after_the_switch_keep_its_window(
    projection: Projection, log: EventLog, producer: ConversationProducer, tmp_path: Path
) -> None:
    old = projection.version
    before_at = await _ask(producer, range(10))
    await _project(projection, log, old)
    before = await _served(projection, old)

    async with projection.pool.connection() as conn:
        new = await create_version(conn, policy=NEW)
    await _project(projection, log, new)  # the rebuild, caught up
    async with projection.pool.connection() as conn:
        await switch(conn, "read_models", new.version)
    # The live projector has not seen the switch yet: it projects the old version, which serves.
    lag_at = await _ask(producer, range(10, 20))
    await _project(projection, log, old)
    lag = await _served(projection, old)
    # It follows: the new version goes on from its own positions and serves from now on.
    after_at = await _ask(producer, range(20, 21))
    await _project(projection, log, new)
    after = await _served(projection, new)

    policy_at = served_policies(projection.pool, WindowPolicy())
    assert _questions(lag) == [f"question {i}" for i in range(9, 20)]  # 12 -> 4 (8 -> 6 keeps 13..19)
    assert await _as_of(log, lag_at, NEW) != lag  # so the window matters here
    points = {"before": before_at, "lag": lag_at, "after": after_at}
    served = {"before": before, "lag": lag, "after": after}
    assert {name: await _as_of(log, at, policy_at) for name, at in points.items()} == served

    settings = Settings(database_url=projection.url, data_dir=tmp_path)
    assert await drop(settings, "read_models", old.version) == 0  # its schema and positions go
    assert {name: await _as_of(log, at, policy_at) for name, at in points.items()} == served
