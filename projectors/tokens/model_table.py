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
    A model name is lower-cased and stripped; a fine-tune id (``ft:<base>:<org>:...``) resolves
    to its base model and a router prefix (``openai/gpt-4o``) is dropped. A table entry (a
    *family*) matches the name itself and every name that continues it with ``-`` or ``.``
    (dated snapshots ``gpt-4o-2024-08-06``, variants ``gpt-4o-mini``, point releases
    ``gpt-5.1``). The longest matching family wins, so ``gpt-4o``, ``gpt-4.1`` and ``gpt-4.5``
    never fall into ``gpt-4``. A name no family matches is *estimated*: counted with the
    caller's default encoding and gpt-4o's overheads, ``ModelSpec.estimated`` set.

Extending: add a ``(family, spec)`` row to :data:`MODEL_TABLE`; order does not matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from events.errors import ConfigurationError, InvalidRequestError
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


_O200K: Final = ModelSpec(encoding="o200k_base")
_CL100K: Final = ModelSpec(encoding="cl100k_base")
# gpt-3.5-turbo-0301: every message is <|start|>{role or name}\n{content}<|end|>\n (cookbook)
_CL100K_0301: Final = ModelSpec(encoding="cl100k_base", tokens_per_message=4, tokens_per_name=-1)

MODEL_TABLE: Final[tuple[tuple[str, ModelSpec], ...]] = (
    # cl100k_base: the cookbook's gpt-3.5-turbo-0613/-0125 and gpt-4-0314/-0613 figures
    ("gpt-3.5-turbo", _CL100K),  # -0613, -16k, -1106, -0125, -instruct
    ("gpt-3.5-turbo-0301", _CL100K_0301),
    ("gpt-35-turbo", _CL100K),  # Azure OpenAI's spelling
    ("gpt-3.5", _CL100K),
    ("gpt-4", _CL100K),  # -0314, -0613, -32k, -turbo, -turbo-2024-04-09, -1106-preview, -vision-preview
    # o200k_base: the cookbook's gpt-4o / gpt-4o-mini figures
    ("gpt-4o", _O200K),  # -mini, -2024-08-06, -audio-preview, -search-preview
    ("chatgpt-4o", _O200K),  # chatgpt-4o-latest
    ("gpt-4.1", _O200K),  # -mini, -nano, -2025-04-14
    ("gpt-4.5", _O200K),  # -preview
    ("gpt-5", _O200K),  # -mini, -nano, -chat-latest, 5.1, 5.2 ...
    ("o1", _O200K),  # -mini, -preview, -pro
    ("o3", _O200K),  # -mini, -pro
    ("o4", _O200K),  # -mini
)

# Longest family first: the first match is the longest one.
_BY_LENGTH: Final = tuple(sorted(MODEL_TABLE, key=lambda row: len(row[0]), reverse=True))
_CONTINUATIONS: Final = ("-", ".")


def normalize_model_name(model: str) -> str:
    """The name the table is searched with: lower-cased, stripped, fine-tune id resolved to its
    base model (``ft:gpt-4o-mini-2024-07-18:acme::abc`` → ``gpt-4o-mini-2024-07-18``) and a
    router prefix dropped (``openai/gpt-4o`` → ``gpt-4o``). Raises :class:`InvalidRequestError` when empty."""
    name = model.strip().lower()
    if name.startswith("ft:"):
        name = name[3:].split(":", 1)[0]
    name = name.rsplit("/", 1)[-1].strip()
    if not name:
        raise InvalidRequestError(f"a model name is required, got {model!r}")
    return name


def _matches(name: str, family: str) -> bool:
    return name == family or (name.startswith(family) and name[len(family)] in _CONTINUATIONS)


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
    name = normalize_model_name(model)
    for family, spec in _BY_LENGTH:
        if _matches(name, family):
            return spec
    return ModelSpec(encoding=default_encoding, estimated=True)


def openai_model(model: str) -> bool:
    """Whether ``model`` is one of OpenAI's (a family of the table, by the rules above): what a
    reasoning item OpenAI encrypted may go to. Raises :class:`InvalidRequestError` when empty."""
    name = normalize_model_name(model)
    return any(_matches(name, family) for family, _ in MODEL_TABLE)
