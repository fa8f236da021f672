"""The projector prepares the next batch (decode, token counts) while the current one's
transaction runs: what it stores is the same as without, and a batch prepared from positions
another consumer moved is never applied."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import pytest

from events.embedded_log import EmbeddedEventLog
from events.keys import ConversationKey
from events.log import LogRecord
from events.producer import ConversationProducer
from pgstore.store import PostgresProjectionStore
from pgstore.versions import compare
from projectors.fold import BatchInputs, fold_batch
from projectors.log_source import LogSource
from projectors.ports import BatchReport
from projectors.prepare import PreparedBatch
from projectors.row_values import countable_reasoning, countable_text
from projectors.runner import Projector
from projectors.tokens import ENCODINGS, TokenCounter, get_encoding
from projectors.window import WindowPolicy
from tests.projection_support import Projection, project_all

pytestmark = pytest.mark.postgres

KEY = ConversationKey("acme", "employee-7", "prepared")


class ZombieFirst:
    """The projection store, with another consumer (a zombie with the same stored position)
    applying the first ``ahead`` records just before this one's first batch: its transaction
    then finds the position moved and conflicts."""

    def __init__(self, store: PostgresProjectionStore, zombie: PostgresProjectionStore, ahead: int) -> None:
        self._store, self._zombie, self._ahead = store, zombie, ahead
        self.schema = store.schema
        self.conflicted = False

    async def positions(self, partitions: Sequence[int]) -> dict[int, int]:
        return await self._store.positions(partitions)

    async def prepare(self, records: Sequence[LogRecord]) -> PreparedBatch:
        return await self._store.prepare(records)

    async def apply(
        self,
        records: Sequence[LogRecord],
        expected: Mapping[int, int],
        *,
        through: Mapping[int, int] | None = None,
        prepared: PreparedBatch | None = None,
    ) -> BatchReport:
        if not self.conflicted and records:
            self.conflicted = True
            await self._zombie.apply(records[: self._ahead], expected)
            await asyncio.sleep(0.2)  # the batch after this one is fetched and prepared meanwhile
        return await self._store.apply(records, expected, through=through, prepared=prepared)

    async def record_unreadable(self, partition: int, offset: int, error: str) -> None:
        await self._store.record_unreadable(partition, offset, error)


async def test_a_batch_prepared_before_a_position_conflict_is_dropped(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    for i in range(30):
        await producer.append_user(KEY, f"question {i}") if i % 2 == 0 else await producer.append_assistant(
            KEY, f"answer {i}", finish_reason="stop"
        )
    store = ZombieFirst(projection.store(), projection.store(), ahead=3)
    projector = Projector(LogSource(log), store, batch_size=10, fetch_timeout_s=0.1)
    await asyncio.wait_for(projector.run(asyncio.Event(), until=await log.end_offsets()), 60)
    assert projector.stats.conflicts == 1
    # Every event once, in log order: the batch prepared from offset 10 while the conflict
    # happened (the zombie had moved the position to 3 only) was not applied past 3..9.
    rows = await projection.rows("SELECT seq, content FROM {s}.transcript ORDER BY seq")
    assert [content for _, content in rows] == [f"question {i}" if i % 2 == 0 else f"answer {i}" for i in range(30)]
    rebuilt = await projection.new_version()
    await project_all(log, projection.store(schema=rebuilt.schema))
    async with projection.pool.connection() as conn:
        assert await compare(conn, projection.version.schema, rebuilt.schema) == []


async def test_batches_are_counted_before_their_transaction_and_store_the_same_counts(
    projection: Projection, log: EmbeddedEventLog, producer: ConversationProducer
) -> None:
    calls = [{"id": "call-1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "审批"}'}}]
    await producer.append_user(KEY, "提交之后审批流程是怎样的？")
    await producer.append_assistant(
        KEY, None, tool_calls=calls, finish_reason="tool_calls", reasoning_content="the user asks about approvals"
    )
    await producer.append_tool_result(KEY, tool_call_id="call-1", content="two approvals")
    await producer.append_assistant(KEY, "Two approvals: your lead's, then the vendor admin's.", finish_reason="stop")
    store = projection.store(counter=TokenCounter(encodings=ENCODINGS))  # both, CONVLOG_TOKEN_ENCODINGS permitting
    await project_all(log, store, batch_size=1)  # the first batch teaches the store its encodings
    stored = await projection.rows(
        "SELECT content, tool_calls, reasoning_content, tokens_o200k, tokens_cl100k, reasoning_tokens_o200k, "
        "reasoning_tokens_cl100k FROM {s}.transcript ORDER BY seq"
    )
    o200k, cl100k = get_encoding("o200k_base"), get_encoding("cl100k_base")
    for content, calls_, reasoning, t_o200k, t_cl100k, r_o200k, r_cl100k in stored:
        parts = [content] if isinstance(content, str) else []
        for call in calls_ or ():
            parts += [call["function"]["name"], call["function"]["arguments"]]
        text = "\n".join(parts)
        assert (t_o200k, t_cl100k) == (len(o200k.encode_ordinary(text)), len(cl100k.encode_ordinary(text)))
        thought = reasoning or ""
        assert (r_o200k, r_cl100k) == (len(o200k.encode_ordinary(thought)), len(cl100k.encode_ordinary(thought)))
    # Preparing the whole log again counts every text the transcript rows count, ahead.
    records = list((await log.read(dict.fromkeys(range(4), 0), timeout_s=0)).records)
    prepared = await store.prepare(records)
    assert set(prepared.counts) == set(ENCODINGS)
    rows = fold_batch(prepared.decoded, BatchInputs({}), policy=WindowPolicy()).transcript
    texts = {t for r in rows for t in (countable_text(r), countable_reasoning(r)) if t}
    assert len(texts) >= 5
    for encoding in ENCODINGS:
        assert texts <= set(prepared.counts[encoding])
