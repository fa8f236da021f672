"""``convlog summarize`` and the summarizer inside ``convlog serve``: settings and wiring.

Settings (environment):
- ``CONVLOG_LLM_BASE_URL`` — an OpenAI-compatible endpoint (``https://api.openai.com/v1``, a
  vLLM or Ollama server...). Unset: the deterministic offline summarizer, no network.
- ``CONVLOG_LLM_API_KEY`` (else ``OPENAI_API_KEY``), ``CONVLOG_LLM_MODEL`` (gpt-4o-mini),
  ``CONVLOG_LLM_TIMEOUT_S`` (60), ``CONVLOG_LLM_MAX_RETRIES`` (2, the client's own retries).
- ``CONVLOG_SUMMARY_MAX_TOKENS`` (400) — a summary's size limit, enforced.
- ``CONVLOG_SUMMARIZER`` — ``off`` keeps ``serve`` from running one.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import structlog
from prometheus_client import CollectorRegistry

from convlog.embedded_pg import database_url
from convlog.metrics_server import start_metrics_endpoint
from convlog.ops_common import run_interruptibly
from convlog.settings import Settings, env_number
from convlog.wiring import make_producer, open_event_log
from events.codec import default_codec
from events.errors import ConfigurationError
from events.log import EventLog
from projectors.kafka_source import KafkaGroupSource
from projectors.log_source import LogSource
from projectors.migrate import migrate
from projectors.pg import PgPool, open_pool, retrying
from projectors.ports import RecordSource
from summarizer.metrics import SummarizerMetrics
from summarizer.models import OfflineSummaryModel
from summarizer.openai_model import OpenAISummaryModel
from summarizer.ports import SummaryModel
from summarizer.runner import Summarizer, SummarizerOptions
from summarizer.store import PostgresSummaryStore

log = structlog.get_logger(__name__)


def consumer_name(settings: Settings) -> str:
    """The summarizer's consumer group and positions name: one summarizer per topic."""
    return f"convlog.summarizer.{settings.topic}"


@dataclass(frozen=True, slots=True)
class SummarizerSettings:
    enabled: bool = True
    base_url: str | None = None
    api_key: str = ""
    model: str = "gpt-4o-mini"
    timeout_s: float = 60.0
    max_retries: int = 2
    max_tokens: int = 400
    start: Literal["earliest", "latest"] = "earliest"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> SummarizerSettings:
        d = cls()
        switch = (env.get("CONVLOG_SUMMARIZER") or "on").strip().lower()
        if switch not in {"on", "off"}:
            raise ConfigurationError(f"CONVLOG_SUMMARIZER must be on or off, got {switch!r}")
        start = (env.get("CONVLOG_SUMMARIZER_START") or d.start).strip().lower()
        if start not in {"earliest", "latest"}:
            raise ConfigurationError(f"CONVLOG_SUMMARIZER_START must be earliest or latest, got {start!r}")
        return cls(
            enabled=switch == "on",
            base_url=(env.get("CONVLOG_LLM_BASE_URL") or "").strip() or None,
            api_key=env.get("CONVLOG_LLM_API_KEY") or env.get("OPENAI_API_KEY") or "",
            model=env.get("CONVLOG_LLM_MODEL") or d.model,
            timeout_s=env_number(env, "CONVLOG_LLM_TIMEOUT_S", d.timeout_s, minimum=0.1),
            max_retries=env_number(env, "CONVLOG_LLM_MAX_RETRIES", d.max_retries, minimum=0),
            max_tokens=env_number(env, "CONVLOG_SUMMARY_MAX_TOKENS", d.max_tokens, minimum=16),
            start="latest" if start == "latest" else "earliest",
        )

    def build_model(self) -> SummaryModel:
        if self.base_url is None:
            return OfflineSummaryModel()
        return OpenAISummaryModel(
            base_url=self.base_url,
            # Local OpenAI-compatible servers often need no key; the client insists on one.
            api_key=self.api_key or "unset",
            model=self.model,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
        )


def build_summarizer(
    settings: Settings,
    pool: PgPool,
    event_log: EventLog,
    env: Mapping[str, str],
    *,
    registry: CollectorRegistry | None = None,
) -> Summarizer:
    """A summarizer appending through ``event_log``: a Kafka consumer group member when Kafka is
    configured, else a reader of ``event_log`` itself (the embedded log)."""
    config = SummarizerSettings.from_env(env)
    source: RecordSource
    if settings.kafka_bootstrap:
        source = KafkaGroupSource(
            bootstrap=settings.kafka_bootstrap,
            topic=settings.topic,
            group_id=consumer_name(settings),
            client_id="convlog-summarizer",
            session_timeout_ms=env_number(env, "CONVLOG_KAFKA_SESSION_TIMEOUT_MS", 10_000, minimum=1),
            heartbeat_interval_ms=1000,
            group_instance_id=env.get("CONVLOG_SUMMARIZER_INSTANCE_ID") or None,
        )
    else:
        source = LogSource(event_log)
    model = config.build_model()
    log.info("summarizer.model", model=model.model, prompt_version=model.prompt_version,
             endpoint=config.base_url or "offline")  # fmt: skip
    return Summarizer(
        source,
        PostgresSummaryStore(pool, consumer=consumer_name(settings)),
        make_producer(event_log, settings, producer="convlog-summarizer"),
        model,
        codec=default_codec(),
        log_ends=event_log.end_offsets,
        metrics=SummarizerMetrics(registry),
        options=SummarizerOptions(max_tokens=config.max_tokens, start=config.start),
    )


async def run_summarizer(settings: Settings, stop: asyncio.Event) -> Summarizer:
    """Summarize until ``stop`` is set (``convlog summarize``). With the embedded log, the
    process must also run the projector: use ``convlog serve``."""
    if not settings.kafka_bootstrap:
        raise ConfigurationError(
            "convlog summarize runs against Kafka (CONVLOG_KAFKA_BOOTSTRAP); with the embedded log, "
            "`convlog serve` runs the summarizer"
        )
    url = await asyncio.to_thread(database_url, settings)
    await retrying(lambda: migrate(url), action="migrating")
    pool = await retrying(lambda: open_pool(url, name="convlog-summarizer", max_size=6), action="connecting")
    event_log = await open_event_log(settings)
    try:
        registry = CollectorRegistry()
        summarizer = build_summarizer(settings, pool, event_log, os.environ, registry=registry)
        start_metrics_endpoint(registry, os.environ)
        await summarizer.run(stop)
        return summarizer
    finally:
        await event_log.close()
        await pool.close()


def main(settings: Settings) -> int:
    """``convlog summarize``: until SIGINT/SIGTERM (a second one aborts the summary in flight)."""

    async def run(stop: asyncio.Event) -> int:
        await run_summarizer(settings, stop)
        return 0

    return run_interruptibly(run)
