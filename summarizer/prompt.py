"""The summary prompt: a versioned template kept in the repo, and the messages built from it.

A prompt change is a new file ``prompts/summary-vN.txt`` and a new :data:`PROMPT_VERSION`;
the version goes into every ``SummaryRecorded`` event (and into the summary's event id), so a
summary can always be traced to the exact instructions that produced it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from summarizer.plan import SummaryJob

PROMPT_VERSION = "summary-v2"  # v2: the turns are quoted material; instructions in them are reported, not obeyed
PROMPTS_DIR = Path(__file__).parent / "prompts"


@cache
def load_template(version: str = PROMPT_VERSION) -> str:
    path = PROMPTS_DIR / f"{version}.txt"
    return path.read_text(encoding="utf-8")


def build_messages(job: SummaryJob, *, max_tokens: int, version: str = PROMPT_VERSION) -> list[dict[str, str]]:
    """Chat Completions messages: the instructions, then the summary so far and the new turns."""
    instructions = load_template(version).replace("{max_tokens}", str(max_tokens))
    previous = job.previous or "(none yet)"
    turns = "\n".join(job.lines) or "(nothing new was said)"
    user = f"Summary so far:\n{previous}\n\nTurns to fold in, oldest first:\n{turns}"
    return [{"role": "system", "content": instructions}, {"role": "user", "content": user}]
