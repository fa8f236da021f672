"""The deterministic offline summary model (the size limit every summary obeys is :mod:`summarizer.limits`).

:class:`OfflineSummaryModel` is an adapter of the :class:`~summarizer.ports.SummaryModel` port
that needs no network and answers the same for the same input, so the demo and the tests run
anywhere; the OpenAI-compatible one lives in :mod:`summarizer.openai_model`.
"""

from __future__ import annotations

from projectors.turns import split_turns_by
from summarizer.limits import count_tokens, enforce_limit
from summarizer.plan import SummaryJob
from summarizer.ports import Draft
from summarizer.transcript import USER_PREFIX


class OfflineSummaryModel:
    """Deterministic, extractive: one bullet per turn (what the user asked, what came of it),
    appended to the summary so far; when over the limit the oldest bullets go first."""

    model = "convlog-offline-extractive"
    prompt_version = "offline-v1"
    bullet_chars = 240

    async def summarize(self, job: SummaryJob, *, max_tokens: int) -> Draft:
        bullets = [b for b in (job.previous or "").splitlines() if b.strip()]
        for turn in _turns(job.lines):
            bullet = " — ".join(turn)
            if len(bullet) > self.bullet_chars:
                bullet = bullet[: self.bullet_chars - 1].rstrip() + "…"
            bullets.append(f"- {bullet}")
        while len(bullets) > 1 and count_tokens("\n".join(bullets)) > max_tokens:
            bullets.pop(0)
        text, _ = enforce_limit("\n".join(bullets), max_tokens)
        return Draft(text)


def _turns(lines: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The job's lines grouped by turn (a user message renders as one ``User:`` line); lines
    before the first turn (a greeting) make a bullet of their own."""
    split = split_turns_by(lines, _line_role)
    return ([split.preamble] if split.preamble else []) + list(split.turns)


def _line_role(line: str) -> str:
    return "user" if line.startswith(USER_PREFIX) else "assistant"
