"""Settings from ``CONVLOG_*`` environment variables, with working local defaults."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from events.errors import ConfigurationError
from events.producer import DEFAULT_MAX_EVENT_BYTES


@dataclass(frozen=True, slots=True)
class Settings:
    kafka_bootstrap: str | None = None  # unset: the embedded log in data_dir
    database_url: str | None = None  # unset: embedded Postgres in data_dir
    data_dir: Path = Path(".convlog")
    topic: str = "convlog.events"
    partitions: int = 12
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        defaults = cls()
        return cls(
            kafka_bootstrap=env.get("CONVLOG_KAFKA_BOOTSTRAP") or None,
            database_url=env.get("CONVLOG_DATABASE_URL") or None,
            data_dir=Path(env.get("CONVLOG_DATA_DIR") or defaults.data_dir),
            topic=env.get("CONVLOG_TOPIC") or defaults.topic,
            partitions=_positive_int(env, "CONVLOG_PARTITIONS", defaults.partitions),
            max_event_bytes=_positive_int(env, "CONVLOG_MAX_EVENT_BYTES", defaults.max_event_bytes),
        )

    @property
    def embedded_log_path(self) -> Path:
        return self.data_dir / "log" / f"{self.topic}.log"


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError as e:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from e
    if value < 1:
        raise ConfigurationError(f"{name} must be >= 1, got {value}")
    return value
