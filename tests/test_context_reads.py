"""How many reads a live context takes of a long range no summary covers yet: the newest rows
first, more when the budget reaches back further — and, for the next context of the same
conversation and budget, as many rows at once as the last one needed (RowsNeeded)."""

from __future__ import annotations

import pytest

from events.embedded_log import EmbeddedEventLog
from events.keys import ConversationKey
from events.producer import ConversationProducer
from pgstore.reads import PostgresReadModels
from projectors.tokens import ModelSpec, model_spec
from query_api.context_types import ContextRequest
from query_api.live import NEWEST_FIRST, RowsNeeded, assemble_live
from query_api.ports import ContextInputs
from tests.projection_support import Projection, project_all

KEY = ConversationKey("acme", "employee-42", "long")


class CountingReads(PostgresReadModels):
    """The Postgres reads, noting the ``newest`` of every context read."""

    reads: list[int | None]

    async def context_inputs(
        self, key: ConversationKey, *, encoding: str, newest: int | None = None
    ) -> ContextInputs | None:
        self.reads.append(newest)
        return await super().context_inputs(key, encoding=encoding, newest=newest)


@pytest.mark.postgres
async def test_the_next_context_of_a_long_range_is_read_once_with_as_many_rows_as_the_last_needed(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    for i in range(150):  # 300 short messages: the newest 128 cost far less than the budget
        await producer.append_user(KEY, f"question {i}?", message_id=f"u{i}")
        await producer.append_assistant(KEY, f"answer {i}.", message_id=f"a{i}")
    await project_all(log, projection.store())
    reads = CountingReads(projection.pool, schema=projection.version.schema)
    reads.reads = []
    spec: ModelSpec = model_spec("gpt-4o", default_encoding="o200k_base")
    request = ContextRequest("gpt-4o", 8000, 0, 0, "omit", 2)
    rows_needed = RowsNeeded()

    first, _ = await assemble_live(reads, KEY, spec, request, rows_needed)
    assert reads.reads[0] == NEWEST_FIRST
    assert len(reads.reads) == 2  # the budget reached past the newest rows
    again, _ = await assemble_live(reads, KEY, spec, request, rows_needed)
    assert len(reads.reads) == 3  # one read: enough rows for the budget, by what they cost last time
    hint = reads.reads[2]
    assert hint is not None
    assert hint > NEWEST_FIRST
    assert again == first
    assert len(first.fragment["messages"]) == 300
    # Without the memory it starts from the newest rows again.
    await assemble_live(reads, KEY, spec, request)
    assert reads.reads[3] == NEWEST_FIRST

    # Longer messages: the budget reaches back fewer rows, and the next first read shrinks.
    for i in range(20):
        await producer.append_user(KEY, f"long question {i}: " + "word " * 300, message_id=f"lu{i}")
        await producer.append_assistant(KEY, f"long answer {i}: " + "word " * 300, message_id=f"la{i}")
    await project_all(log, projection.store())
    del reads.reads[:]
    served, _ = await assemble_live(reads, KEY, spec, request, rows_needed)
    assert reads.reads == [hint]
    await assemble_live(reads, KEY, spec, request, rows_needed)
    smaller = reads.reads[1]
    assert smaller is not None
    assert smaller < hint
    assert len(reads.reads) == 2
    assert served == (await assemble_live(reads, KEY, spec, request))[0]  # the whole range's answer
