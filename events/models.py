"""OpenAI's model families and how a model name is matched to one: what the provider formats
(events/formats/) bind reasoning with (an encrypted Responses reasoning item goes to OpenAI's
models only; a response's dated snapshot is the alias asked for) and what the token accounting
(projectors/tokens/model_table.py, the model table) counts with. Here, in the events layer, so
that both sides use one list; each family names how it counts (the table's spec for it).

Matching
    A model name is lower-cased and stripped; a fine-tune id (``ft:<base>:<org>:...``) resolves
    to its base model and a router prefix (``openai/gpt-4o``) is dropped. A *family* matches
    the name itself and every name that continues it with ``-`` or ``.`` (dated snapshots
    ``gpt-4o-2024-08-06``, variants ``gpt-4o-mini``, point releases ``gpt-5.1``). The longest
    matching family wins, so ``gpt-4o``, ``gpt-4.1`` and ``gpt-4.5`` never fall into ``gpt-4``.
    A name no family matches is no OpenAI model (*estimated*, in the token accounting).

Extending: add a family to :data:`OPENAI_FAMILIES`, with how it counts; order does not matter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, TypeAlias

from events.errors import InvalidRequestError

__all__ = ["OPENAI_FAMILIES", "Counting", "family_of", "normalize_model_name", "openai_model"]

Counting: TypeAlias = Literal["o200k", "cl100k", "cl100k-0301"]
"""How a family counts: its encoding and per-message overheads (projectors/tokens/model_table.py)."""

OPENAI_FAMILIES: Final[Mapping[str, Counting]] = {
    # cl100k_base: the cookbook's gpt-3.5-turbo-0613/-0125 and gpt-4-0314/-0613 figures
    "gpt-3.5-turbo": "cl100k",  # -0613, -16k, -1106, -0125, -instruct
    "gpt-3.5-turbo-0301": "cl100k-0301",
    "gpt-35-turbo": "cl100k",  # Azure OpenAI's spelling
    "gpt-3.5": "cl100k",
    "gpt-4": "cl100k",  # -0314, -0613, -32k, -turbo, -turbo-2024-04-09, -1106-preview, -vision-preview
    # o200k_base: the cookbook's gpt-4o / gpt-4o-mini figures
    "gpt-4o": "o200k",  # -mini, -2024-08-06, -audio-preview, -search-preview
    "chatgpt-4o": "o200k",  # chatgpt-4o-latest
    "gpt-4.1": "o200k",  # -mini, -nano, -2025-04-14
    "gpt-4.5": "o200k",  # -preview
    "gpt-5": "o200k",  # -mini, -nano, -chat-latest, 5.1, 5.2 ...
    "o1": "o200k",  # -mini, -preview, -pro
    "o3": "o200k",  # -mini, -pro
    "o4": "o200k",  # -mini
}

# Longest family first: the first match is the longest one.
_BY_LENGTH: Final = tuple(sorted(OPENAI_FAMILIES, key=len, reverse=True))
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


def family_of(model: str) -> str | None:
    """The longest of :data:`OPENAI_FAMILIES` ``model`` is in, or None (no OpenAI model).
    Raises :class:`InvalidRequestError` when empty."""
    name = normalize_model_name(model)
    return next((family for family in _BY_LENGTH if _matches(name, family)), None)


def openai_model(model: str) -> bool:
    """Whether ``model`` is one of OpenAI's (a family, by the rules above): what a reasoning
    item OpenAI encrypted may go to. Raises :class:`InvalidRequestError` when empty."""
    return family_of(model) is not None
