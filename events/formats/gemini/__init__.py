"""Gemini generateContent, both ways: ``parse`` (the append side), ``render`` (the serve side), ``rules``
(what both sides check), ``traits``. :data:`FORMAT` is the format's one object
(:class:`~events.formats.provider.ProviderFormat`), listed in :mod:`events.formats.registry`."""

from __future__ import annotations

from typing import Final

from events.formats.gemini.parse import parse
from events.formats.gemini.render import render
from events.formats.gemini.rules import violations
from events.formats.gemini.traits import TRAITS
from events.formats.provider import Provider, ignoring_target

__all__ = ["FORMAT"]

FORMAT: Final = Provider("gemini", parse, render, ignoring_target(violations), TRAITS)
