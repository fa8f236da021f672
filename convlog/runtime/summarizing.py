"""``convlog summarize`` and the summarizer inside ``convlog serve``: settings and wiring.

Settings (declared in :mod:`convlog.settings`): ``CONVLOG_LLM_BASE_URL`` — an OpenAI-compatible
endpoint (``https://api.openai.com/v1``, a vLLM or Ollama server...); unset: the deterministic
offline summarizer, no network. ``CONVLOG_LLM_*`` for the call, ``CONVLOG_SUMMARY_MAX_TOKENS`` for
a summary's size limit, ``CONVLOG_SUMMARIZER=off`` keeps ``serve`` from running one.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from prometheus_client import CollectorRegistry

from convlog.interruptible import run_interruptibly
from convlog.resources import keyed_codec, migrated_database_url, opened_keys, service_pool, summarizer_group
from convlog.runtime.metrics_server import start_metrics_endpoint
from convlog.settings import Settings
from convlog.wiring import make_producer, open_event_log
from events.errors import ConfigurationError
from events.log import EventLog
from events.sealing.ports import KeyStore
from pgstore.pool import PgPool, database_identity, retrying
from pgstore.summaries import PostgresSummaryStore
from projectors.kafka_source import KafkaGroupSource
from projectors.log_source import LogSource
from projectors.ports import RecordSource
from summarizer.metrics import SummarizerMetrics
from summarizer.offline_model import OfflineSummaryModel
from summarizer.openai_model import OpenAISummaryModel
from summarizer.ports import SummaryModel
from summarizer.runner import Summarizer, SummarizerOptions

log = structlog.get_logger(__name__)


def consumer_name(settings: Settings) -> str:
    """The summarizer's positions name (rows of ``convlog.summarizer_positions`` in its database):
    one summarizer per topic and database."""
    return f"convlog.summarizer.{settings.topic}"


def summary_model(settings: Settings) -> SummaryModel:
    """The OpenAI-compatible model at ``CONVLOG_LLM_BASE_URL``, else the offline one."""
    if settings.llm_base_url is None:
        return OfflineSummaryModel()
    return OpenAISummaryModel(
        base_url=settings.llm_base_url,
        # Local OpenAI-compatible servers often need no key; the client insists on one.
        api_key=settings.llm_api_key.get_secret_value() if settings.llm_api_key else "unset",
        model=settings.llm_model,
        timeout_s=settings.llm_timeout_s,
        max_retries=settings.llm_max_retries,
    )


def build_summarizer(
    settings: Settings,
    pool: PgPool,
    event_log: EventLog,
    *,
    registry: CollectorRegistry | None = None,
    database: str = "",
    keys: KeyStore | None = None,
) -> Summarizer:
    """A summarizer appending through ``event_log``: a Kafka consumer group member when Kafka is
    configured, else a reader of ``event_log`` itself (the embedded log). ``database``: the
    pool's :func:`~pgstore.pool.database_identity`, for the group's name (needed with Kafka)."""
    source: RecordSource
    if settings.kafka_bootstrap:
        if not database:
            raise ValueError("a Kafka summarizer's group is named for its database: pass database_identity(pool)")
        source = KafkaGroupSource(
            bootstrap=settings.kafka_bootstrap,
            topic=settings.topic,
            group_id=summarizer_group(settings.topic, database),
            client_id="convlog-summarizer",
            session_timeout_ms=settings.kafka_session_timeout_ms,
            heartbeat_interval_ms=1000,
            group_instance_id=settings.summarizer_instance_id,
        )
    else:
        source = LogSource(event_log)
    model = summary_model(settings)
    log.info(
        "summarizer.model",
        model=model.model,
        prompt_version=model.prompt_version,
        endpoint=settings.llm_base_url or "offline",
    )
    return Summarizer(
        source,
        PostgresSummaryStore(pool, consumer=consumer_name(settings), keys=keys),
        make_producer(event_log, settings, producer="convlog-summarizer", keys=keys),
        model,
        codec=keyed_codec(keys),
        log_ends=event_log.end_offsets,
        metrics=SummarizerMetrics(registry),
        options=SummarizerOptions(max_tokens=settings.summary_max_tokens, start=settings.summarizer_start),
    )


async def run_summarizer(settings: Settings, stop: asyncio.Event) -> Summarizer:
    """Summarize until ``stop`` is set (``convlog summarize``). With the embedded log, the
    process must also run the projector: use ``convlog serve``."""
    if not settings.kafka_bootstrap:
        raise ConfigurationError(
            "convlog summarize runs against Kafka (CONVLOG_KAFKA_BOOTSTRAP); with the embedded log, "
            "`convlog serve` runs the summarizer"
        )
    url = await migrated_database_url(settings)
    pool = await service_pool(url, name="convlog-summarizer", max_size=6)
    event_log = await open_event_log(settings)
    stack = contextlib.AsyncExitStack()  # the key store
    try:
        keys = await stack.enter_async_context(opened_keys(settings))
        registry = CollectorRegistry()
        database = await retrying(lambda: database_identity(pool), action="identifying the database")
        summarizer = build_summarizer(settings, pool, event_log, registry=registry, database=database, keys=keys)
        start_metrics_endpoint(registry, settings)
        await summarizer.run(stop)
        return summarizer
    finally:
        await stack.aclose()
        await event_log.close()
        await pool.close()


def main(settings: Settings) -> int:
    """``convlog summarize``: until SIGINT/SIGTERM (a second one aborts the summary in flight)."""

    async def run(stop: asyncio.Event) -> int:
        await run_summarizer(settings, stop)
        return 0

    return run_interruptibly(run)
