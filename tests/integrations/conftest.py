"""The framework adapters' tests: a summarising ``convlog serve`` they share, and no network (the
Agents SDK's tracing, which exports to OpenAI by default, is off)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from convlog.client import AsyncConvlogClient, ConvlogClient
from tests.live_server import TOKEN, convlog_serve

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "true")


@pytest.fixture(scope="module")
def summarising(pg_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ``convlog serve`` with the (offline) summarizer on and a window of at most 4 turns."""
    with convlog_serve(
        pg_admin_url,
        tmp_path_factory.mktemp("serve-summaries"),
        CONVLOG_SUMMARIZER="on",
        CONVLOG_WINDOW_MAX_TURNS="4",
        CONVLOG_WINDOW_KEEP_TURNS="2",
    ) as url:
        yield url


@pytest.fixture
def convlog_client(served: str) -> Iterator[ConvlogClient]:
    """convlog's Python client of the module's ``convlog serve`` (tests/conftest.py: ``served``)."""
    with ConvlogClient(served, token=TOKEN) as client:
        yield client


@pytest.fixture
async def async_convlog_client(served: str) -> AsyncIterator[AsyncConvlogClient]:
    """The same, async."""
    async with AsyncConvlogClient(served, token=TOKEN) as client:
        yield client
