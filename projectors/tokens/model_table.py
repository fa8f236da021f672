"""The model table: which tiktoken encoding and which per-message overheads a model counts with.

Sources
    OpenAI's cookbook "How to count tokens with tiktoken"
    (openai/openai-cookbook, ``examples/How_to_count_tokens_with_tiktoken.ipynb``): 3 tokens
    per message, +1 per ``name``, +3 reply priming for gpt-3.5-turbo-0613/-0125, gpt-4-0314,
    gpt-4-0613 and gpt-4o/gpt-4o-mini (checked there against the API's ``prompt_tokens``);
    gpt-3.5-turbo-0301 used 4 per message and -1 per name (the name replaced the role).
    Encodings follow ``tiktoken.model`` (tiktoken 0.14): o200k_base for gpt-4o, gpt-4.1,
    gpt-4.5, gpt-5 and the o-series; cl100k_base for gpt-4, gpt-4-turbo and gpt-3.5-turbo.
    The cookbook verified the overheads only up to gpt-4o; the newer o200k_base families are
    assumed to count like gpt-4o (OpenAI publishes nothing else).

Matching
    The families (OpenAI's) and how a name is matched to one live in :mod:`events.models`, which
    the provider formats use too: the table is one row per family, its spec the family's
    :data:`~events.models.Counting`. A name no family matches is *estimated*: counted with the
    caller's default encoding and gpt-4o's overheads, ``ModelSpec.estimated`` set.

Extending: add the family to :data:`events.models.OPENAI_FAMILIES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from events.errors import ConfigurationError
from events.models import OPENAI_FAMILIES, Counting, family_of, normalize_model_name, openai_model
from projectors.tokens.encodings import ENCODINGS

__all__ = ["MODEL_TABLE", "ModelSpec", "model_spec", "normalize_model_name", "openai_model"]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """How a model family counts: OpenAI's published method (cookbook "How to count tokens")."""

    encoding: str  # tiktoken encoding name
    tokens_per_message: int = 3
    tokens_per_name: int = 1
    reply_priming: int = 3  # every reply is primed with <|start|>assistant<|message|>
    image_tokens: int = 765  # estimate per image part (a 1024x1024 "high" image on gpt-4o)
    estimated: bool = False  # True for models the table does not know


_SPECS: Final[Mapping[Counting, ModelSpec]] = {
    "o200k": ModelSpec(encoding="o200k_base"),
    "cl100k": ModelSpec(encoding="cl100k_base"),
    # gpt-3.5-turbo-0301: every message is <|start|>{role or name}\n{content}<|end|>\n (cookbook)
    "cl100k-0301": ModelSpec(encoding="cl100k_base", tokens_per_message=4, tokens_per_name=-1),
}

MODEL_TABLE: Final[tuple[tuple[str, ModelSpec], ...]] = tuple(
    (family, _SPECS[counting]) for family, counting in OPENAI_FAMILIES.items()
)


def model_spec(model: str, *, default_encoding: str = "o200k_base") -> ModelSpec:
    """How ``model`` counts tokens (see the module docstring for the matching rules).

    Unknown models (``deepseek-v4``, ``qwen-max``) get ``ModelSpec(encoding=default_encoding,
    estimated=True)``: a tiktoken count is only an estimate of another vendor's tokenizer.
    Raises :class:`~events.errors.InvalidRequestError` for an empty name and
    :class:`~events.errors.ConfigurationError` when ``default_encoding`` is not one convlog
    counts with.
    """
    if default_encoding not in ENCODINGS:
        raise ConfigurationError(
            f"unknown default token encoding {default_encoding!r}: convlog counts with {' or '.join(ENCODINGS)}"
        )
    family = family_of(model)
    return ModelSpec(encoding=default_encoding, estimated=True) if family is None else _SPECS[OPENAI_FAMILIES[family]]
