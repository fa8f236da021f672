"""What a provider format is: one object behind one Protocol, :class:`ProviderFormat`.

A format is a package ``events/formats/<name>/`` (``parse.py`` the append side, ``render.py``
the serve side, ``rules.py`` the provider's rules both sides use, ``traits.py`` what the
assembler and the estimator must know of it) whose ``__init__`` exposes ``FORMAT``, and one line
in :mod:`events.formats.registry`. Nothing else in convlog names a provider: the assembler, the
estimator and the rule check ask a format's :class:`Traits` instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias

from events.formats import Parser
from events.formats.rendering import Rendered, Renderer, RenderRequest, Target

__all__ = ["Checker", "FragmentRule", "Provider", "ProviderFormat", "Traits", "ignoring_target"]

Checker: TypeAlias = Callable[[Mapping[str, Any], Target], list[str]]
"""Every breach of a format's rules in a request fragment rendered for ``target`` (empty: valid)."""

FragmentRule: TypeAlias = Callable[[Mapping[str, Any]], list[str]]


@dataclass(frozen=True, slots=True)
class Traits:
    """What the format-neutral code must know of a format, asked instead of its name.

    ``model_bound_reasoning``: its reasoning blobs go back only to the model that made them, and
    one of no recorded model to none (Anthropic signatures, Gemini thought signatures); else
    (Responses) to OpenAI's models (:func:`events.formats.rendering.reasoning_served`).
    ``reasoning_by_policy``: it carries no native reasoning or opaque block, only Chat
    Completions' ``reasoning_content``, served by the request's reasoning policy (``omit`` |
    ``tool_turns`` | ``all``). ``cache_granularity``: what a provider prompt cache reuses — a
    token prefix (OpenAI, DeepSeek, Gemini) or whole blocks up to a breakpoint (Anthropic): the
    summary is one cache unit in the latter (query_api/context.py). ``estimate_factor``: the
    uncalibrated tokens of the provider per o200k_base token (query_api/estimates.py).
    ``listed_elsewhere``: what a context rendered in *another* format must list as dropped of
    this format's messages beyond what that renderer reports (Gemini: its thought signatures on
    calls and text parts, which no other format has a place for). ``messages_are_items``: a
    payload's items are its neutral messages, one to one (a list of Chat Completions messages),
    so a message the validator refuses is named by its item's path (``[2].content``); else by
    its place among the payload's messages (``messages[2].content``). ``prompt_cache_key``: the
    provider routes requests with the same ``prompt_cache_key`` to the same cache (OpenAI's Chat
    Completions and Responses): a served context gives one per conversation.
    """

    model_bound_reasoning: bool = False
    reasoning_by_policy: bool = False
    cache_granularity: Literal["token_prefix", "block"] = "token_prefix"
    estimate_factor: float = 1.0
    listed_elsewhere: Callable[[RenderRequest, Rendered], Rendered] | None = None
    messages_are_items: bool = False
    prompt_cache_key: bool = False


class ProviderFormat(Protocol):
    """A provider's request format, both ways: its payloads to neutral messages (``parse``, the
    append side), a neutral selection to its request fragment (``render``, the serve side), the
    rules every rendered fragment must satisfy (``violations``) and its :class:`Traits`."""

    @property
    def name(self) -> str: ...

    @property
    def traits(self) -> Traits: ...

    @property
    def parse(self) -> Parser: ...

    @property
    def render(self) -> Renderer: ...

    @property
    def violations(self) -> Checker: ...


@dataclass(frozen=True, slots=True)
class Provider:
    """The :class:`ProviderFormat` every format package builds its ``FORMAT`` with."""

    name: str
    parse: Parser
    render: Renderer
    violations: Checker
    traits: Traits = Traits()


def ignoring_target(rule: FragmentRule) -> Checker:
    """A :data:`Checker` of a format whose rules do not depend on the request's options."""

    def check(fragment: Mapping[str, Any], target: Target, /) -> list[str]:  # noqa: ARG001 - the Checker signature
        return rule(fragment)

    return check
