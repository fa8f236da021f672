"""Token budgets for models convlog has no tokenizer for (Claude, Gemini, DeepSeek, ...).

No offline tokenizer exists for current Claude or Gemini models, so their contexts are
*estimated*: counted with tiktoken's ``o200k_base`` and the gpt-4o message overheads (the same
counts the projector stores), then multiplied by a factor, and fitted to the budget with a
stated safety margin.

The factor is **calibrated per conversation** from what the provider reported: an assistant
message's recorded prompt tokens (``usage.prompt_tokens``: the whole prompt, cache reads and
writes included) are the true size of the context that produced it. Between two answers of the
same format and model, the prompt grew by exactly what came between them (the first answer, the
tool results, the next question) — the system prompts, the summary and the tool definitions are
in both figures and cancel out. So the newest such pair among the range's newest
:data:`CALIBRATION_MESSAGES` gives ``factor = (reported_2 - reported_1) / (estimate of what came
between)``, provided the prompt grew (a window move or a new summary in between shrinks it: that
pair is skipped) by at least 32 raw tokens. Without such a pair the format's default factor
applies. The factor is clamped to ``[0.25, 4]`` so one odd usage report cannot make a context
absurd. Pure, and it looks only at the range's newest messages: a live read of the newest rows
calibrates exactly as ``as_of`` does from the whole range.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Final, Protocol

from events.formats.registry import FORMATS, FormatRegistry
from events.formats.rendering import Selected, Target, same_model
from projectors.tokens import ModelSpec

__all__ = ["CALIBRATION_MESSAGES", "DEFAULT_FACTORS", "SAFETY_MARGIN", "Estimate", "estimate_for"]

SAFETY_MARGIN: Final = 0.10
"""The share of the budget an estimated context leaves unused, on top of the calibrated factor."""

DEFAULT_FACTORS: Final[Mapping[str, float]] = {f.name: f.traits.estimate_factor for f in FORMATS}
"""Uncalibrated factors by format (tokens of the provider per o200k_base token), each format's
``estimate_factor`` trait (events/formats/<format>/traits.py): 1.3 for Anthropic, 1.0 elsewhere.

Measured by ``bench/estimate_error.py`` on ``tests/fixtures/usage`` (real requests with the
prompt size the provider reported): each is the smallest factor, in steps of 0.05, whose
estimate plus :data:`SAFETY_MARGIN` covers every measured request (the figures behind each are
beside it, in its traits module)."""

_CLAMP: Final = (0.25, 4.0)
_MIN_GROWTH: Final = 32  # raw tokens between two answers below which their usage says too little

CALIBRATION_MESSAGES: Final = 64
"""How far back calibration looks: the range's newest messages (a live read of the newest rows
holds them, so it calibrates exactly as ``as_of``, which reads the whole range)."""


class _Costed(Protocol):
    @property
    def selected(self) -> Selected: ...
    @property
    def cost(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Estimate:
    factor: float
    margin: float
    calibrated_by: str | None = None  # the newer of the two answers whose reported usage set the factor
    reported_growth: int | None = None  # how much the reported prompt grew between them
    estimated_growth: int | None = None  # the raw estimate of what came between them
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
                "reported_growth": self.reported_growth,
                "estimated_growth": self.estimated_growth,
            },
        }


def estimate_for(
    spec: ModelSpec, target: Target, candidates: Sequence[_Costed], *, formats: FormatRegistry = FORMATS
) -> Estimate | None:
    """None when ``spec`` counts exactly (an OpenAI model); else the calibrated estimate.
    ``candidates``: the messages the context could serve among the range's newest
    :data:`CALIBRATION_MESSAGES`, in order, with their raw costs; without a calibrating pair,
    the target format's ``estimate_factor`` (in ``formats``)."""
    if not spec.estimated:
        return None
    before = 0  # raw cost of the candidates ahead of the current one
    answers: list[tuple[str, int, int]] = []  # (message id, reported prompt, raw cost before it)
    for c in candidates:
        m = c.selected.message
        if (
            m.role == "assistant"
            and m.prompt_tokens
            and (m.api or "chat_completions") == target.format
            and m.model
            and same_model(m.model, target.model)
        ):
            answers.append((m.message_id, m.prompt_tokens, before))
        before += c.cost
    for (_, reported_1, before_1), (message_id, reported_2, before_2) in reversed(list(pairwise(answers))):
        grown, estimated = reported_2 - reported_1, before_2 - before_1
        if grown > 0 and estimated >= _MIN_GROWTH:
            factor = round(min(max(grown / estimated, _CLAMP[0]), _CLAMP[1]), 4)
            return Estimate(factor, SAFETY_MARGIN, message_id, grown, estimated)
    return Estimate(formats.traits(target.format).estimate_factor, SAFETY_MARGIN)
