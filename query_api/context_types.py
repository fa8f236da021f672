"""What the query side works with: stored messages as read from the transcript and the current
summary (defined in :mod:`events.formats.stored`, below the renderers, and re-exported here: this
is their public import path), a context request and a context. Plain frozen dataclasses; no
driver types."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, get_args

from events.blocks import ApiFormat
from events.errors import ConvlogError, InvalidRequestError
from events.formats.rendering import Dropped
from events.formats.stored import StoredMessage, StoredSummary  # re-exported: their public import path
from projectors.tokens import ModelSpec  # re-exported: the model table owns it

if TYPE_CHECKING:
    from query_api.estimates import Estimate

__all__ = [
    "REASONING_POLICIES",
    "Context",
    "ContextBudgetExceededError",
    "ContextEdit",
    "ContextRequest",
    "EditingPolicy",
    "ModelSpec",
    "NoRoomError",
    "ReasoningPolicy",
    "StoredMessage",
    "StoredSummary",
]

# Defined below the renderers (events/formats/stored.py), public here: reported as defined here,
# as numpy's set_module does, so that docs, reprs and pickles name the path users import.
StoredMessage.__module__ = StoredSummary.__module__ = __name__

ReasoningPolicy: TypeAlias = Literal["omit", "tool_turns", "all"]
REASONING_POLICIES: tuple[ReasoningPolicy, ...] = get_args(ReasoningPolicy)  # for argparse choices


@dataclass(frozen=True, slots=True)
class EditingPolicy:
    """Context editing (query_api/context_editing.py): what of the range's older turns a context
    serves cleared. Tool results: on when ``tool_results_trigger`` is set — once the context
    exceeds that many tokens, the results of the tool uses older than the newest
    ``tool_results_keep`` are served as a placeholder, never those of the ``tool_results_exclude``
    tools, and only when at least ``tool_results_at_least`` tokens go at once. Thinking: on when
    ``thinking_keep_turns`` is set — the reasoning of the turns older than the newest that many
    is left out, at least ``thinking_at_least`` tokens at once. Part of the request: the same
    policy over the same history makes the same edits (``as_of`` rebuilds them)."""

    tool_results_trigger: int | None = None
    tool_results_keep: int = 3
    tool_results_at_least: int = 0
    tool_results_exclude: frozenset[str] = frozenset()
    thinking_keep_turns: int | None = None
    thinking_at_least: int = 0

    @property
    def active(self) -> bool:
        return self.tool_results_trigger is not None or self.thinking_keep_turns is not None


NO_EDITING = EditingPolicy()


@dataclass(frozen=True, slots=True)
class ContextEdit:
    """What one kind of edit changed in a served context: the tokens it saved (in the context's
    tokens, as ``token_count``) and the messages it changed, in order."""

    kind: Literal["clear_thinking", "clear_tool_results"]
    cleared_tokens: int
    messages: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ContextRequest:
    model: str
    budget_tokens: int
    reserve_tokens: int = 0  # kept free for the model's answer
    tools_tokens: int = 0  # what the request's tool definitions cost
    reasoning: ReasoningPolicy = "omit"
    image_turns: int = 2  # only the last N turns keep their images
    format: ApiFormat = "chat_completions"  # the provider format the context is rendered in
    cache: bool = False  # anthropic: place cache_control breakpoints
    editing: EditingPolicy = NO_EDITING  # context editing (query_api/context_editing.py)

    @property
    def message_budget(self) -> int:
        """What the budget leaves for the messages: less the answer's reserve and the tools."""
        return self.budget_tokens - self.reserve_tokens - self.tools_tokens

    def refuse_no_room(self) -> None:
        """:class:`NoRoomError` when the reserve and the tools take the whole budget: no context
        could fit, whatever the conversation holds (checked where a request is taken)."""
        if self.message_budget <= 0:
            raise NoRoomError(
                f"reserve_tokens ({self.reserve_tokens}) and tools_tokens ({self.tools_tokens}) leave none of "
                f"budget_tokens ({self.budget_tokens}) for the messages"
            )


class NoRoomError(InvalidRequestError):
    """A context request whose reserve and tools take its whole budget (HTTP 422)."""

    code = "reserve_exceeds_budget"


@dataclass(frozen=True, slots=True)
class Context:
    token_count: int
    encoding: str
    dropped_turns: int
    compressed: bool  # a summary is in it
    summary: StoredSummary | None
    format: ApiFormat = "chat_completions"
    # The provider's request keys: {"messages"} (chat_completions), {"system", "messages"}
    # (anthropic), {"instructions", "input"} (responses), {"system_instruction", "contents"} (gemini).
    fragment: dict[str, Any] = field(default_factory=dict)
    dropped: tuple[Dropped, ...] = ()  # what the format could not carry, and why
    estimate: Estimate | None = None  # set when the model has no tokenizer here (query_api/estimates.py)
    units: tuple[tuple[str, int], ...] = ()  # (what, tokens) in order: query_api.cache_prefix compares them
    edits: tuple[ContextEdit, ...] = ()  # what context editing changed (the request's EditingPolicy)

    @property
    def messages(self) -> tuple[dict[str, Any], ...]:
        """The Chat Completions ``messages`` array (empty in another format: see ``fragment``)."""
        return tuple(self.fragment["messages"]) if self.format == "chat_completions" else ()


class ContextBudgetExceededError(ConvlogError):
    """Even the system messages, the summary and the current turn's user message (with its
    newest tool group) do not fit: ``needed`` tokens, ``available`` in the budget."""

    code = "context_budget_exceeded"

    def __init__(self, *, needed: int, available: int) -> None:
        super().__init__(f"the context needs at least {needed} tokens; the budget leaves {available}")
        self.needed = needed
        self.available = available
