"""Provider formats on the query side: one renderer and one rule checker per format.

``query_api/formats/<format>.py`` has ``render(RenderRequest) -> Rendered`` and
``violations(fragment) -> list[str]``; :mod:`query_api.formats.types` holds what they share
(the selection they render, the reasoning binding). Modules are imported on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, cast

from events.blocks import API_FORMATS
from query_api.formats.types import Renderer

__all__ = ["checker_for", "renderer_for"]


@cache
def _module(name: str) -> Any:
    if name not in API_FORMATS:
        raise ValueError(f"unknown format {name!r}")
    return importlib.import_module(f"query_api.formats.{name}")


def renderer_for(name: str) -> Renderer:
    return cast("Renderer", _module(name).render)


def checker_for(name: str) -> Callable[[Mapping[str, Any]], list[str]]:
    return cast("Callable[[Mapping[str, Any]], list[str]]", _module(name).violations)
