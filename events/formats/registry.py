"""The provider formats convlog speaks, listed once: :data:`FORMATS`, used by the append side
(``?format=`` on the HTTP append, the producer's ``append_native``) and the serve side (the
context's ``format``) alike.

A format is one package ``events/formats/<name>/`` exposing ``FORMAT`` (a
:class:`~events.formats.provider.ProviderFormat`) and one line in :data:`FORMATS`, imported
plainly so import-linter sees every edge. A :class:`FormatRegistry` is a value: a test (or an
embedder) adds a format with :meth:`FormatRegistry.with_format` and passes the registry where
it appends and where it assembles, no global is patched.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from events.errors import InvalidRequestError
from events.event_types import API_FORMATS
from events.formats import Parser, anthropic, chat_completions, gemini, responses
from events.formats.provider import ProviderFormat, Traits
from events.formats.rendering import DropReason, Rendered, RenderRequest, Target, reasoning_served
from events.formats.stored import StoredMessage

__all__ = ["APPEND_FORMATS", "FORMATS", "NATIVE_FORMATS", "FormatRegistry"]


@dataclass(frozen=True, slots=True)
class FormatRegistry:
    """Provider formats by name, in order (the order the API lists them in)."""

    formats: tuple[ProviderFormat, ...]
    _by_name: Mapping[str, ProviderFormat] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {f.name: f for f in self.formats})

    def __iter__(self) -> Iterator[ProviderFormat]:
        return iter(self.formats)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.formats)

    def with_format(self, added: ProviderFormat) -> FormatRegistry:
        """This registry with ``added``: in the place of the format of its name, else last."""
        if added.name in self._by_name:
            return FormatRegistry(tuple(added if f.name == added.name else f for f in self.formats))
        return FormatRegistry((*self.formats, added))

    def without(self, name: str) -> FormatRegistry:
        """This registry less the format ``name`` (a build without it)."""
        return FormatRegistry(tuple(f for f in self.formats if f.name != name))

    def format(self, name: str) -> ProviderFormat:
        """The format ``name``; :class:`InvalidRequestError` (code ``unknown_format``) for one
        convlog does not know, or one this registry does not have."""
        found = self._by_name.get(name)
        if found is not None:
            return found
        if name in API_FORMATS:
            raise _unknown(f"format {name!r} is not available in this build")
        raise _unknown(f"unknown format {name!r}; expected one of {', '.join(self.names)}")

    def parser_for(self, name: str) -> Parser:
        return self.format(name).parse

    def traits(self, name: str) -> Traits:
        return self.format(name).traits

    def render(self, request: RenderRequest) -> Rendered:
        """``request`` rendered in its target's format, with what the other formats list of
        their messages it has no place for (:attr:`Traits.listed_elsewhere`)."""
        target = request.target.format
        rendered = self.format(target).render(request)
        for other in self.formats:
            if other.name != target and other.traits.listed_elsewhere is not None:
                rendered = other.traits.listed_elsewhere(request, rendered)
        return rendered

    def violations(self, fragment: Mapping[str, Any], target: Target) -> list[str]:
        """Every breach of ``target.format``'s rules in ``fragment`` (empty: valid)."""
        return self.format(target.format).violations(fragment, target)

    def reasoning_served(self, message: StoredMessage, target: Target) -> DropReason | None:
        """None if ``message``'s native reasoning blocks may go to ``target``, else why not
        (:func:`events.formats.rendering.reasoning_served`, with the target format's traits)."""
        traits = self.traits(target.format)
        return reasoning_served(
            message, target, model_bound=traits.model_bound_reasoning, by_policy=traits.reasoning_by_policy
        )


def _unknown(message: str) -> InvalidRequestError:
    error = InvalidRequestError(message)
    error.code = "unknown_format"
    return error


FORMATS: Final = FormatRegistry(
    (
        chat_completions.FORMAT,
        anthropic.FORMAT,
        responses.FORMAT,
        gemini.FORMAT,
    )
)

APPEND_FORMATS: Final[tuple[str, ...]] = FORMATS.names
NATIVE_FORMATS: Final[tuple[str, ...]] = tuple(f for f in APPEND_FORMATS if f != "chat_completions")
