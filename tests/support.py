"""Helpers shared by tests (fixtures live in conftest.py)."""

from __future__ import annotations

import uuid


def unique_topic(prefix: str = "test") -> str:
    return f"{prefix}.{uuid.uuid4().hex[:12]}"
