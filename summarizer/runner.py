"""The summarizer consumer: after a turn completes, fold the turns that left the window into the
running summary and append it to the log as a ``SummaryRecorded`` event.

It reads the log with its own consumer group and its own positions (in Postgres, never Kafka's
committed offsets) and decides what to summarize from the live read models, which it lets
catch up first: before handling records of a partition it waits until the projection applied
them — and everything this process (or, after an assignment, anyone) appended to it before —
so it always sees the summaries already recorded. Exactly one summary per watermark follows:

- a redelivery or a restart after the append finds the watermark covered in the read models;
- a restart between the model's answer and the append asks the model again and appends under
  the same derived event id (:func:`summarizer.plan.summary_event_id`);
- two instances during a rebalance derive the same event id, which the projections apply once.

Failures never block anything else: the projections and the context API do not wait for
summaries, and turns no summary covers stay in the context raw. A retriable model or log error
is retried with capped exponential backoff and jitter until it succeeds (positions do not move
meanwhile); a refused request is logged and counted, and the turns stay raw until the next
completed turn tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import structlog

from events.codec import EventCodec
from events.errors import ConvlogError
from events.event_types import MessageAppended, MessageRedacted, SummaryRecorded, tool_calls_ran
from events.keys import ConversationKey
from events.log import LogRecord
from events.producer import Appended, ConversationProducer
from projectors.ports import RecordSource
from projectors.retry import retrying
from summarizer.limits import count_tokens, enforce_limit
from summarizer.metrics import SummarizerMetrics
from summarizer.plan import SummaryJob, plan
from summarizer.ports import Draft, SummaryModel, SummaryStore

log = structlog.get_logger(__name__)

NOTHING_TO_KEEP = "(The earlier turns held nothing to keep.)"


@dataclass(frozen=True, slots=True)
class SummarizerOptions:
    max_tokens: int = 400  # of a summary (enforced, in o200k_base tokens)
    max_input_tokens: int = 6000  # of the turns one model call folds in
    max_rows: int = 2000  # pending messages read per plan
    concurrency: int = 4  # conversations summarized at once
    batch_size: int = 500
    fetch_timeout_s: float = 0.5
    poll_s: float = 0.05  # while waiting for the projection
    retry_base_s: float = 0.5
    retry_max_delay_s: float = 30.0
    max_rounds: int = 100  # summaries per conversation per batch (catching up a long backlog)
    # Where a summarizer that never read a partition starts: "earliest" reads the whole log (every
    # conversation with turns out of its window gets summarized: model calls for all history),
    # "latest" its end as of the first start (conversations are summarized at their next turn).
    start: Literal["earliest", "latest"] = "earliest"


@dataclass(slots=True)
class SummarizerStats:
    recorded: int = 0
    model_calls: int = 0
    failures: int = 0
    batches: int = 0
    last_error: str | None = None
    positions: dict[int, int] = field(default_factory=dict)


class Summarizer:
    def __init__(
        self,
        source: RecordSource,
        store: SummaryStore,
        producer: ConversationProducer,
        model: SummaryModel,
        *,
        codec: EventCodec,
        log_ends: Callable[[], Awaitable[Mapping[int, int]]],
        metrics: SummarizerMetrics | None = None,
        options: SummarizerOptions | None = None,
    ) -> None:
        self._source = source
        self._store = store
        self._producer = producer
        self._model = model
        self._codec = codec
        self._log_ends = log_ends
        self._metrics = metrics or SummarizerMetrics()
        self._o = options or SummarizerOptions()
        self._next: dict[int, int] = {}  # owned partition -> next offset to handle
        self._barrier: dict[int, int] = {}  # partition -> offset the projection must reach first
        self._stop = asyncio.Event()
        self.stats = SummarizerStats(positions=self._next)

    @property
    def model(self) -> SummaryModel:
        return self._model

    async def on_assigned(self, partitions: frozenset[int]) -> Mapping[int, int]:
        # Whatever a previous owner appended (a summary, just before it died) is before today's
        # end: the read models must show it before this process plans anything.
        ends = await self._log_ends()
        start_at = {p: ends.get(p, 0) for p in partitions} if self._o.start == "latest" else None
        stored, unread = await retrying(
            lambda: self._store.positions(sorted(partitions), start_at=start_at), action="loading positions"
        )
        backlog = sum(ends.get(p, 0) for p in unread)
        if backlog and start_at is None:
            log.warning(
                "summarizer.reading_the_whole_log",
                partitions=sorted(unread),
                records=backlog,
                hint="conversations of the whole history get summarized (model calls); "
                "CONVLOG_SUMMARIZER_START=latest starts at the log's end instead",
            )
        for p in partitions:
            self._barrier[p] = max(self._barrier.get(p, 0), ends.get(p, 0))
        self._next.update(stored)
        log.info("summarizer.assigned", consumer=self._store.consumer, positions=stored, fresh=sorted(unread))
        return stored

    async def on_revoked(self, partitions: frozenset[int]) -> None:
        for p in partitions:
            self._next.pop(p, None)
            self._barrier.pop(p, None)

    async def run(self, stop: asyncio.Event) -> None:
        self._stop = stop
        await self._source.start(self)
        try:
            while not stop.is_set():
                batch = await self._source.fetch(max_records=self._o.batch_size, timeout_s=self._o.fetch_timeout_s)
                records = [
                    r for r in batch.records if r.partition in self._next and r.offset >= self._next[r.partition]
                ]
                # Positions past transaction markers and aborted records move too (lag reaches 0).
                moved = {p: o for p, o in batch.positions.items() if p in self._next and o > self._next[p]}
                if records or moved:
                    await self._handle(records, moved)
        finally:
            await self._source.stop()

    async def _handle(self, records: Sequence[LogRecord], moved: Mapping[int, int]) -> None:
        ends: dict[int, int] = dict(moved)  # the reader's positions, past what holds no record
        triggers: dict[ConversationKey, int] = {}
        for r in records:
            ends[r.partition] = max(r.offset + 1, ends.get(r.partition, 0))
            key = self._completed_turn(r)
            if key is not None:
                triggers[key] = r.partition
        if triggers:
            need = {p: max(ends[p], self._barrier.get(p, 0)) for p in set(triggers.values())}
            schema = await self._wait_for_projection(need)
            if schema is None:
                return  # stopping: nothing handled, positions unchanged
            limit = asyncio.Semaphore(self._o.concurrency)

            async def one(key: ConversationKey, partition: int) -> None:
                async with limit:
                    await self._summarize(schema, key, partition)

            await asyncio.gather(*(one(k, p) for k, p in triggers.items()))
            if self._stop.is_set():
                return  # a conversation may have been left half done: handle the batch again
        await retrying(lambda: self._store.save_positions(ends), action="storing positions")
        for p, o in ends.items():
            if p in self._next:
                self._next[p] = o
        self.stats.batches += 1

    def _completed_turn(self, record: LogRecord) -> ConversationKey | None:
        """The conversation whose turn this record completes — an assistant message that waits
        for no tool results — or whose summary a redaction may have withdrawn (it is redone at
        once). Records that do not decode are the projection's business.

        The body decides, never the ``convlog.event_type`` header: a foreign producer may send
        another value there (Avro's full name, ...), and trusting it skipped that producer's
        turns — no summary, silently. Skipping on the header saved little: nearly every record
        is a message, which has to be decoded anyway."""
        try:
            event = self._codec.decode(record.value)
        except ConvlogError:
            return None
        body = event.body
        if isinstance(body, MessageRedacted):
            return event.key
        if not isinstance(body, MessageAppended) or body.role != "assistant":
            return None
        if body.tool_calls and tool_calls_ran(body.finish_reason):
            return None
        return event.key

    async def _summarize(self, schema: str, key: ConversationKey, partition: int) -> None:
        """Record summaries for ``key`` until every turn that left its window is covered."""
        failures = 0
        drafted: tuple[SummaryJob, Draft] | None = None  # survives a failed append: the model is not asked twice
        for _ in range(self._o.max_rounds):
            if self._stop.is_set():
                return
            inputs = await retrying(
                lambda: self._store.summary_inputs(schema, key, max_rows=self._o.max_rows),
                action=f"reading the summary inputs of {key}",
            )
            job = plan(inputs, max_input_tokens=self._o.max_input_tokens, count=count_tokens) if inputs else None
            if job is None:
                return
            event_id = job.event_id(self._model.prompt_version)
            try:
                if drafted is None or drafted[0] != job:
                    drafted = (job, await self._draft(job))
                if not await self._still_current(job, partition):
                    continue  # a message it folds was redacted meanwhile (or more turns left): plan again
                appended = await self._append(job, event_id, drafted[1])
            except ConvlogError as e:
                self.stats.failures += 1
                self.stats.last_error = str(e)
                self._metrics.failures.labels(e.code).inc()
                if not e.retriable:
                    log.error("summarizer.refused", conversation_key=str(key), error=str(e), code=e.code)  # noqa: TRY400 - an answer, not a crash: no traceback
                    return
                delay = min(self._o.retry_max_delay_s, self._o.retry_base_s * 2**failures) * random.uniform(0.5, 1.0)  # noqa: S311 - jitter
                failures += 1
                log.warning("summarizer.retrying", conversation_key=str(key), error=str(e), retry_in_s=round(delay, 2))
                await self._sleep(delay)
                continue
            failures = 0
            self._barrier[partition] = max(self._barrier.get(partition, 0), appended.offset + 1)
            if await self._wait_for_projection({partition: appended.offset + 1}) is None:
                return
        log.warning("summarizer.rounds_exhausted", conversation_key=str(key), rounds=self._o.max_rounds)

    async def _still_current(self, job: SummaryJob, partition: int) -> bool:
        """Whether ``job`` still holds once the read models show everything in the log now — in
        particular no redaction of a message it folds: a summary must never carry redacted
        content (one recorded before a redaction is withdrawn by the projections; this closes
        the gap of a redaction that lands while the model is writing)."""
        ends = await self._log_ends()
        schema = await self._wait_for_projection({partition: ends.get(partition, 0)})
        if schema is None:
            return False
        inputs = await retrying(
            lambda: self._store.summary_inputs(schema, job.key, max_rows=self._o.max_rows),
            action=f"reading the summary inputs of {job.key}",
        )
        again = plan(inputs, max_input_tokens=self._o.max_input_tokens, count=count_tokens) if inputs else None
        return (
            again is not None
            and again.previous == job.previous
            and again.generation == job.generation
            and again.covers_through_seq >= job.covers_through_seq
            and again.lines[: len(job.lines)] == job.lines
        )

    async def _draft(self, job: SummaryJob) -> Draft:
        if not job.lines:  # only unusable messages left the window: move the watermark, keep the text
            return Draft(job.previous or NOTHING_TO_KEEP)
        self.stats.model_calls += 1
        started = time.monotonic()
        draft = await self._model.summarize(job, max_tokens=self._o.max_tokens)
        self._metrics.llm_seconds.observe(time.monotonic() - started)
        if draft.input_tokens is not None:
            self._metrics.llm_tokens.labels("input").inc(draft.input_tokens)
        if draft.output_tokens is not None:
            self._metrics.llm_tokens.labels("output").inc(draft.output_tokens)
        return draft

    async def _append(self, job: SummaryJob, event_id: str, draft: Draft) -> Appended:
        text, cut = enforce_limit(draft.text, self._o.max_tokens)
        body = SummaryRecorded(
            summary_id=event_id,
            text=text,
            covers_through_message_id=job.covers_through_message_id,
            model=self._model.model,
            prompt_version=self._model.prompt_version,
            input_tokens=draft.input_tokens,
            output_tokens=draft.output_tokens,
            summary_tokens=count_tokens(text),
            excluded_message_ids=job.excluded,
        )
        appended = await self._producer.append(job.key, body, event_id=event_id)
        self.stats.recorded += 1
        self._metrics.recorded.inc()
        log.info(
            "summarizer.recorded",
            conversation_key=str(job.key),
            covers_through_message_id=job.covers_through_message_id,
            turns=job.turns,
            partition=appended.partition,
            offset=appended.offset,
            event_id=event_id,
            summary_tokens=body.summary_tokens,
            truncated=cut,
            model=body.model,
            prompt_version=body.prompt_version,
        )
        return appended

    async def _wait_for_projection(self, need: Mapping[int, int]) -> str | None:
        """The live read models' schema once they applied each partition up to ``need``; None
        when stopping first."""
        warned_at = time.monotonic()
        while not self._stop.is_set():
            schema, positions = await retrying(lambda: self._positions(need), action="reading projection positions")
            behind = {p: (positions[p], o) for p, o in need.items() if positions[p] < o}
            if not behind:
                return schema
            if time.monotonic() - warned_at > 30:
                warned_at = time.monotonic()
                log.warning("summarizer.waiting_for_projection", behind={p: f"{a}<{b}" for p, (a, b) in behind.items()})
            await self._sleep(self._o.poll_s)
        return None

    async def _positions(self, need: Mapping[int, int]) -> tuple[str, dict[int, int]]:
        schema = await self._store.live_schema()
        return schema, await self._store.projection_positions(schema, sorted(need))

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
