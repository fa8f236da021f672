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
from query_api.formats.types import Rendered, Renderer, RenderRequest, signatures_left_out

__all__ = ["checker_for", "renderer_for"]


@cache
def _module(name: str) -> Any:
    if name not in API_FORMATS:
        raise ValueError(f"unknown format {name!r}")
    return importlib.import_module(f"query_api.formats.{name}")


@cache
def renderer_for(name: str) -> Renderer:
    """The format's renderer, listing the Gemini signatures it leaves out (:func:`signatures_left_out`)."""
    render = cast("Renderer", _module(name).render)

    def rendered(request: RenderRequest, /) -> Rendered:
        return signatures_left_out(request, render(request))

    return rendered


def checker_for(name: str) -> Callable[[Mapping[str, Any]], list[str]]:
    return cast("Callable[[Mapping[str, Any]], list[str]]", _module(name).violations)
