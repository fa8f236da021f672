"""Chat Completions, both ways: ``parse`` (today's message object, or a list of them), ``render``
(the ``messages`` array OpenAI, DeepSeek and every OpenAI-compatible endpoint take), ``rules``
(the valid-context rules), ``traits``. :data:`FORMAT` is the format's one object
(:class:`~events.formats.provider.ProviderFormat`), listed in :mod:`events.formats.registry`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from events.formats.chat_completions.parse import parse
from events.formats.chat_completions.render import render
from events.formats.chat_completions.rules import violations
from events.formats.chat_completions.traits import TRAITS
from events.formats.provider import Provider
from events.formats.rendering import Target

__all__ = ["FORMAT"]


def _check(fragment: Mapping[str, Any], target: Target, /) -> list[str]:
    return violations(fragment["messages"], reasoning=target.reasoning)


FORMAT: Final = Provider("chat_completions", parse, render, _check, TRAITS)
