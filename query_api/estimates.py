"""Token budgets for models convlog has no tokenizer for (Claude, Gemini, DeepSeek, ...).

No offline tokenizer exists for current Claude or Gemini models, so their contexts are
*estimated*: counted with tiktoken's ``o200k_base`` and the gpt-4o message overheads (the same
counts the projector stores), then multiplied by a factor, and fitted to the budget with a
stated safety margin.

The factor is **calibrated per conversation** from what the provider reported: an assistant
message's recorded prompt tokens (``usage.prompt_tokens``: the whole prompt, cache reads and
writes included) are the true size of the context that produced it. The newest such answer of
the same format and model in the context's range gives ``factor = reported / estimated``,
where ``estimated`` is this estimate of everything before that answer (the system prompts, the
summary and the messages in range ahead of it) and ``reported`` leaves out the request's own
``tools_tokens`` (the tool definitions that answer was sent with are in its figure; an app sends
the same tools every turn — if it sent more then, the factor errs on the large side). Without
such an answer the format's default factor applies. The factor is clamped to ``[0.25, 4]`` so
one odd usage report cannot make a context absurd. Pure: the same inputs give the same
estimate (``as_of`` reproduces it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from projectors.tokens import ModelSpec
from query_api.formats.types import Selected, Target, same_model

__all__ = ["DEFAULT_FACTORS", "SAFETY_MARGIN", "Estimate", "estimate_for"]

SAFETY_MARGIN: Final = 0.10
"""The share of the budget an estimated context leaves unused, on top of the calibrated factor."""

DEFAULT_FACTORS: Final[Mapping[str, float]] = {"anthropic": 1.3, "gemini": 1.0}
"""Uncalibrated factors by format (tokens of the provider per o200k_base token); 1.0 elsewhere.

Measured by ``bench/estimate_error.py`` on ``tests/fixtures/usage`` (real requests with the
prompt size the provider reported): each is the smallest factor, in steps of 0.05, whose
estimate plus :data:`SAFETY_MARGIN` covers every measured request. Anthropic 1.3: reported
tokens per o200k_base-counted token are a median 1.02 but reach 1.40 on claude-opus-4-8 (its
newer tokenizer counts more), which 1.2 plus the margin undercounts; extended thinking adds a
fixed ~30 tokens that no factor models. Gemini 1.0: the ratio is at most 1.06 (a median 0.60:
gpt-4o's per-message overheads over-count short prompts)."""

_CLAMP: Final = (0.25, 4.0)


class _Costed(Protocol):
    @property
    def selected(self) -> Selected: ...
    @property
    def cost(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Estimate:
    factor: float
    margin: float
    calibrated_by: str | None = None  # the message whose reported usage set the factor
    reported_prompt_tokens: int | None = None
    estimated_prompt_tokens: int | None = None
    raw_tokens: int = 0  # the o200k_base estimate of the served context, before the factor

    def tokens_available(self, budget: int) -> int:
        """How much of ``budget`` the raw estimate may use."""
        return math.floor(budget / (self.factor * (1 + self.margin)))

    def scaled(self, tokens: int, *, margin: bool) -> int:
        return math.ceil(tokens * self.factor * ((1 + self.margin) if margin else 1))

    def as_json(self) -> dict[str, Any]:
        return {
            "method": "o200k_base",
            "raw_tokens": self.raw_tokens,
            "factor": self.factor,
            "safety_margin": self.margin,
            "calibration": None
            if self.calibrated_by is None
            else {
                "message_id": self.calibrated_by,
                "reported_prompt_tokens": self.reported_prompt_tokens,
                "estimated_prompt_tokens": self.estimated_prompt_tokens,
            },
        }


def estimate_for(
    spec: ModelSpec, target: Target, fixed: int, candidates: Sequence[_Costed], *, tools_tokens: int = 0
) -> Estimate | None:
    """None when ``spec`` counts exactly (an OpenAI model); else the calibrated estimate.
    ``candidates``: every message the context could serve, in order, with its raw cost;
    ``fixed``: the raw cost of the system prompts, the summary and the reply priming."""
    if not spec.estimated:
        return None
    before = fixed
    found: tuple[str, int, int] | None = None
    for c in candidates:
        m = c.selected.message
        if (
            m.role == "assistant"
            and m.prompt_tokens
            and (m.api or "chat_completions") == target.format
            and m.model
            and same_model(m.model, target.model)
            and before > 0
        ):
            found = (m.message_id, m.prompt_tokens, before)
        before += c.cost
    if found is None:
        return Estimate(DEFAULT_FACTORS.get(target.format, 1.0), SAFETY_MARGIN)
    message_id, reported, estimated = found
    factor = round(min(max(max(reported - tools_tokens, 1) / estimated, _CLAMP[0]), _CLAMP[1]), 4)
    return Estimate(factor, SAFETY_MARGIN, message_id, reported, estimated)
