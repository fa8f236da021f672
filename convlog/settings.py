"""Settings from ``CONVLOG_*`` environment variables, with working local defaults."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

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
            partitions=env_number(env, "CONVLOG_PARTITIONS", defaults.partitions, minimum=1),
            max_event_bytes=env_number(env, "CONVLOG_MAX_EVENT_BYTES", defaults.max_event_bytes, minimum=1),
        )

    @property
    def embedded_log_path(self) -> Path:
        return self.data_dir / "log" / f"{self.topic}.log"


N = TypeVar("N", int, float)


def env_number(env: Mapping[str, str], name: str, default: N, *, minimum: N) -> N:
    """``env[name]`` as a number of ``default``'s type, at least ``minimum``; ``default`` when
    unset. A malformed or too small value is a :class:`ConfigurationError` naming the setting."""
    raw = env.get(name)
    if not raw:
        return default
    kind = type(default)
    try:
        value = kind(raw)
    except ValueError as e:
        raise ConfigurationError(f"{name} must be {'an integer' if kind is int else 'a number'}, got {raw!r}") from e
    if value < minimum:
        raise ConfigurationError(f"{name} must be >= {minimum}, got {value}")
    return value
