"""the OpenAI Responses API, both ways: ``parse`` (the append side), ``render`` (the serve side), ``rules``
(what both sides check), ``traits``. :data:`FORMAT` is the format's one object
(:class:`~events.formats.provider.ProviderFormat`), listed in :mod:`events.formats.registry`."""

from __future__ import annotations

from typing import Final

from events.formats.provider import Provider, ignoring_target
from events.formats.responses.parse import parse
from events.formats.responses.render import render
from events.formats.responses.rules import violations
from events.formats.responses.traits import TRAITS

__all__ = ["FORMAT"]

FORMAT: Final = Provider("responses", parse, render, ignoring_target(violations), TRAITS)
