"""Provider-reported prompt sizes (tests/fixtures/usage/<format>.json) and convlog's estimate of each.

Every item is a real request whose reported size is public: Anthropic's ``usage.input_tokens``
(plus cache reads and writes, the whole prompt) or a ``count_tokens`` answer, Gemini's
``usageMetadata.promptTokenCount`` or a ``countTokens`` ``totalTokens``, next to the exact
system prompt and messages that produced it. ``source`` says where each was published (a
provider's documentation page, a cookbook notebook's recorded output, or a VCR cassette that a
public test suite recorded against the live API, with the commit). Only text requests without
tool definitions, structured-output schemas, images or documents are kept: convlog's estimate
covers the served context, not the caller's tools. A cassette whose response names another
model than its request (a hand-edited recording) is left out; a request that several sources
or recordings repeat for the same model is kept once.
Items marked ``extended_thinking`` enabled Anthropic's extended thinking, which adds a fixed
prompt overhead of about 30 tokens that no ratio captures; they are measured apart.

The estimate is the one :func:`query_api.estimates.estimate_for` scales: the messages counted
as Chat Completions messages with ``o200k_base`` and gpt-4o's overheads
(:func:`projectors.tokens.count_messages`, the system prompt as a first ``system`` message),
times the format's factor.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from projectors.tokens import count_messages, get_encoding, model_spec

FIXTURES = Path(__file__).parent / "fixtures" / "usage"
FORMATS = ("anthropic", "gemini")


@dataclass(frozen=True, slots=True)
class Measured:
    source: str
    model: str
    reported: int  # the provider's figure for the whole prompt
    raw: int  # o200k_base with gpt-4o's overheads, before any factor
    extended_thinking: bool  # the request enabled Anthropic's extended thinking (a fixed overhead)

    @property
    def ratio(self) -> float:
        """Provider tokens per estimated token: the factor that would have been exact."""
        return self.reported / self.raw

    def estimate(self, factor: float, margin: float = 0.0) -> int:
        """What convlog budgets for this prompt (``Estimate.scaled``)."""
        return math.ceil(self.raw * factor * (1 + margin))


def chat_messages(item: dict[str, Any]) -> list[dict[str, Any]]:
    system = item.get("system")
    return ([{"role": "system", "content": system}] if system else []) + list(item["messages"])


def load(fmt: str) -> list[Measured]:
    items = json.loads((FIXTURES / f"{fmt}.json").read_text(encoding="utf-8"))
    spec = model_spec("gpt-4o")
    encoding = get_encoding(spec.encoding)
    return [
        Measured(
            source=i["source"],
            model=i["model"],
            reported=i["reported_input_tokens"],
            raw=count_messages(chat_messages(i), spec, encoding),
            extended_thinking=bool(i.get("extended_thinking")),
        )
        for i in items
    ]
