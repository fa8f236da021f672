"""What the Agents SDK session tests share: the live ``convlog serve`` of the client's tests
(its ``served`` fixture: the embedded log and the test Postgres) and the session on it."""

from __future__ import annotations

import uuid

from convlog.client import AsyncConvlogClient
from convlog.integrations.agents import ConvlogSession
from tests.live_server import TOKEN

__all__ = ["TOKEN", "USER", "new_id", "session_on"]

USER = "u-agents"


def new_id(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def session_on(client: AsyncConvlogClient, session_id: str | None = None, **kwargs: object) -> ConvlogSession:
    return ConvlogSession(session_id or new_id(), client=client, user_id=USER, **kwargs)  # type: ignore[arg-type]
