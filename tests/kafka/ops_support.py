"""Running the operators' commands as a user does: ``python -m convlog.cli.main ...`` in a
subprocess, against a topic of the test's own and a temporary database."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from events.kafka_log import KafkaEventLog
from events.producer import ConversationProducer
from tests.projection_support import Projection
from tests.support import unique_topic

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 4


@dataclass
class Ops:
    env: dict[str, str]
    log: KafkaEventLog
    producer: ConversationProducer
    projection: Projection
    topic: str

    def run(
        self, *args: str, timeout: float = 120, extra_env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "convlog.cli.main", *args],
            cwd=REPO,
            env={**self.env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def ops_env(kafka_bootstrap: str, url: str, topic: str, data_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CONVLOG_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "CONVLOG_DATABASE_URL": url,
        "CONVLOG_TOPIC": topic,
        "CONVLOG_PARTITIONS": str(PARTITIONS),
        "CONVLOG_DATA_DIR": str(data_dir),
        "CONVLOG_LOG_LEVEL": "warning",
    }


@asynccontextmanager
async def ops_context(kafka_bootstrap: str, projection: Projection, tmp_path: Path) -> AsyncIterator[Ops]:
    """Each test module's ``ops`` fixture: a fresh topic, a producer on it, the CLI's environment."""
    topic = unique_topic("ops")
    log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=PARTITIONS)
    try:
        yield Ops(
            ops_env(kafka_bootstrap, projection.url, topic, tmp_path),
            log,
            ConversationProducer(log, producer="ops-test"),
            projection,
            topic,
        )
    finally:
        await log.close()
