"""A toy fifth format, test-only: Mistral's chat shape (``mistral``), to show what a new provider
costs — this one package (parse, render, rules) and one registry line
(``FORMATS.with_format(FORMAT)``, tests/formats/test_toy_provider.py). Its traits are the
defaults but for the uncalibrated estimate factor."""

from __future__ import annotations

from events.formats.provider import Provider, Traits, ignoring_target
from tests.formats.toy_provider.parse import parse
from tests.formats.toy_provider.render import render
from tests.formats.toy_provider.rules import violations

FORMAT = Provider("mistral", parse, render, ignoring_target(violations), Traits(estimate_factor=1.1))
