"""The bound docs/formats.md states for estimated budgets holds on real provider-reported prompt sizes.

tests/fixtures/usage/<format>.json: requests whose prompt size Anthropic or Gemini reported
(sources in each item). bench/estimate_error.py prints the full figures.
"""

from __future__ import annotations

import pytest

from query_api.estimates import DEFAULT_FACTORS, SAFETY_MARGIN
from tests.usage_dataset import FORMATS, load

COVERED = 1.0  # the share of requests the budgeted estimate must not undercount: all of them, measured
THINKING_OVERHEAD = 32  # tokens extended thinking may add beyond the budgeted estimate


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_budgeted_estimate_covers_the_reported_size_of_nine_requests_in_ten(fmt: str) -> None:
    items = [m for m in load(fmt) if not m.extended_thinking]
    factor = DEFAULT_FACTORS[fmt]
    under = [m for m in items if m.estimate(factor, SAFETY_MARGIN) < m.reported]
    assert len(items) >= 10
    assert 1 - len(under) / len(items) >= COVERED, [(m.source, m.reported, m.raw) for m in under]


def test_extended_thinking_adds_a_fixed_overhead_within_the_stated_bound() -> None:
    items = [m for m in load("anthropic") if m.extended_thinking]
    factor = DEFAULT_FACTORS["anthropic"]
    assert items
    assert all(m.reported - m.estimate(factor, SAFETY_MARGIN) <= THINKING_OVERHEAD for m in items), [
        (m.source, m.reported, m.raw) for m in items
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_item_names_where_its_figure_was_published(fmt: str) -> None:
    for m in load(fmt):
        assert m.source.startswith("https://")
        assert m.reported > 0
        assert m.raw > 0
