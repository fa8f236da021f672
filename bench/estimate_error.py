"""How far convlog's estimated prompt size is from what Anthropic and Gemini reported.

For every request in tests/fixtures/usage/<format>.json (real requests with the provider's
reported prompt size, sources in each item): the raw estimate (the messages counted as Chat
Completions messages with o200k_base and gpt-4o's overheads), the estimate convlog budgets
with (raw x the format's default factor), the reported figure, and ratio = estimate / reported
(above 1: the estimate is on the safe side). Per format: the median and the worst ratio, how
often the estimate plus SAFETY_MARGIN covers the reported figure, and the *safe factor*: the
smallest factor, in steps of 0.05, with which the estimate plus the margin covers every
measured request (Anthropic requests with extended thinking aside: that adds a fixed ~30
tokens, no factor models it; their worst shortfall in tokens is printed instead).

    PYTHONPATH=. python bench/estimate_error.py [--items]
"""

from __future__ import annotations

import argparse
import math
import statistics

from query_api.estimates import DEFAULT_FACTORS, SAFETY_MARGIN
from tests.usage_dataset import FORMATS, Measured, load

STEP = 0.05


def safe_factor(items: list[Measured], margin: float) -> float:
    """The smallest multiple of STEP whose estimate plus ``margin`` is >= every reported size."""
    need = max(m.ratio for m in items) / (1 + margin)
    factor = math.ceil(round(need / STEP, 6)) * STEP
    while any(m.estimate(factor, margin) < m.reported for m in items):  # ceil() rounding at the edge
        factor += STEP
    return round(factor, 2)


def report(fmt: str, *, show_items: bool) -> None:
    factor = DEFAULT_FACTORS.get(fmt, 1.0)
    items = load(fmt)
    plain = [m for m in items if not m.extended_thinking]
    thinking = [m for m in items if m.extended_thinking]
    ratios = sorted(m.estimate(factor) / m.reported for m in plain)
    covered = sum(m.estimate(factor, SAFETY_MARGIN) >= m.reported for m in plain)
    print(f"{fmt}: {len(items)} requests ({len(thinking)} with extended thinking), default factor {factor}")
    if show_items:
        for m in items:
            mark = " thinking" if m.extended_thinking else ""
            print(
                f"  {m.reported:6d} reported {m.raw:6d} raw {m.estimate(factor):6d} estimate "
                f"{m.estimate(factor) / m.reported:5.2f}  {m.model}{mark}  {m.source}"
            )
    print(
        f"  estimate / reported: median {statistics.median(ratios):.2f}, worst {ratios[0]:.2f}, "
        f"best {ratios[-1]:.2f}; reported / raw: median {statistics.median(m.ratio for m in plain):.3f}, "
        f"max {max(m.ratio for m in plain):.3f}"
    )
    print(f"  estimate x (1 + {SAFETY_MARGIN}) >= reported: {covered}/{len(plain)} ({covered / len(plain):.0%})")
    print(f"  safe factor (covers every request with the margin): {safe_factor(plain, SAFETY_MARGIN)}")
    if thinking:
        short = max(m.reported - m.estimate(factor, SAFETY_MARGIN) for m in thinking)
        print(f"  extended thinking: worst shortfall of the estimate plus the margin: {short} tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--items", action="store_true", help="print every request")
    args = parser.parse_args()
    for fmt in FORMATS:
        report(fmt, show_items=args.items)


if __name__ == "__main__":
    main()
