"""What the format-neutral code must know of Anthropic Messages (:class:`~events.formats.provider.Traits`)."""

from __future__ import annotations

from typing import Final

from events.formats.provider import Traits

__all__ = ["TRAITS"]

TRAITS: Final = Traits(
    # Thinking signatures are bound to the model that made them ("Invalid signature" elsewhere).
    model_bound_reasoning=True,
    # The prompt cache reuses whole blocks up to a cache_control breakpoint: the summary, one
    # block, is one cache unit.
    cache_granularity="block",
    # Measured by bench/estimate_error.py on tests/fixtures/usage (query_api/estimates.py):
    # reported tokens per o200k_base-counted token are a median 1.02 but reach 1.40 on
    # claude-opus-4-8 (its newer tokenizer counts more), which 1.2 plus the margin undercounts;
    # extended thinking adds a fixed ~30 tokens that no factor models.
    estimate_factor=1.3,
)
