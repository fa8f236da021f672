"""Fixtures of the Kafka test modules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.kafka.ops_support import Ops, ops_context
from tests.projection_support import Projection


@pytest.fixture
async def ops(kafka_bootstrap: str, projection: Projection, tmp_path: Path) -> AsyncIterator[Ops]:
    """A fresh topic, a producer on it and the CLI's environment, for the operators' commands."""
    async with ops_context(kafka_bootstrap, projection, tmp_path) as o:
        yield o
