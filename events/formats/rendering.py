"""What a format's renderer gets and returns, and which stored blocks a target may be served.

The context assembler (query_api/context.py) decides *what* is served — which turns, which
tool calls (answered ones only), which images — the same for every format. A renderer
(``events/formats/<format>/render.py``) decides only *how*: it turns the selection into that
provider's request fragment, enforcing the provider's own rules by construction, and says what
it could not carry (:class:`Dropped`). Pure functions over frozen dataclasses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias

from events.blocks import ApiFormat, Block, MediaBlock, TextBlock, ToolCallBlock
from events.formats.stored import StoredMessage
from events.models import normalize_model_name, openai_model

__all__ = [
    "DropReason",
    "Dropped",
    "RenderRequest",
    "Rendered",
    "Renderer",
    "Selected",
    "Target",
    "extras_served",
    "reasoning_served",
    "same_model",
    "stored_blocks",
]

DropReason: TypeAlias = Literal[
    "other_provider",  # a reasoning blob or native extra bound to the format/provider that made it
    "other_model",  # a reasoning blob bound to the model that made it (Anthropic, Gemini signatures)
    "policy",  # Chat Completions reasoning_content the request's reasoning policy leaves out
    "unsupported",  # the target format has no place for it (an opaque block of another format)
    "unservable",  # a stored message no context can carry (query_api/unservable.py): left out whole
]


@dataclass(frozen=True, slots=True)
class Target:
    """Where the context goes: the format, the model it is for, and the request's options."""

    format: ApiFormat
    model: str
    reasoning: str = "omit"  # chat_completions only: omit | tool_turns | all (DeepSeek thinking mode)
    cache: bool = False  # anthropic: place cache_control breakpoints


@dataclass(frozen=True, slots=True)
class Selected:
    """One message the assembler serves. ``call_ids``: the tool calls to serve (every call of
    an assistant message that was answered; an interrupted message's are none), in the
    message's order. ``keep_images``: images stay (else a text placeholder, the request's
    ``image_turns``). ``include_reasoning``: the Chat Completions policy's decision for this
    message's ``reasoning_content`` (other formats decide with :func:`reasoning_served`)."""

    message: StoredMessage
    call_ids: tuple[str, ...] = ()
    keep_images: bool = True
    include_reasoning: bool = False


@dataclass(frozen=True, slots=True)
class RenderRequest:
    system: tuple[StoredMessage, ...]  # stored system prompts, in order (usable, with content)
    summary: str | None  # the summary's system text (header included), if any
    messages: tuple[Selected, ...]  # valid by the neutral rules: turns, tool groups complete
    target: Target


@dataclass(frozen=True, slots=True)
class Dropped:
    message_id: str
    what: str  # "reasoning", "opaque", "extra", ...
    reason: DropReason


@dataclass(frozen=True, slots=True)
class Rendered:
    fragment: dict[str, Any]  # the provider's request keys: {"messages": ...}, {"system": ..., "messages": ...}
    dropped: tuple[Dropped, ...] = ()


class Renderer(Protocol):
    def __call__(self, request: RenderRequest, /) -> Rendered: ...


def reasoning_served(
    message: StoredMessage, target: Target, *, model_bound: bool, by_policy: bool = False
) -> DropReason | None:
    """None if ``message``'s native reasoning blocks may go to ``target``, else why not
    (``model_bound``, ``by_policy``: the target format's traits, events/formats/provider.py).

    Reasoning blobs are bound to who made them: only to the target's own format, never to one
    whose reasoning is ``by_policy`` (Chat Completions: its ``reasoning_content`` follows the
    request's policy, not this); when the
    target format's reasoning is ``model_bound`` (its traits: Anthropic signatures and Gemini
    thought signatures, "Invalid signature" elsewhere) only to the model that made them, and a
    message of no recorded model cannot be shown to be the target's. Else (Responses reasoning
    items) to OpenAI, and to the model when the message records one (a model that does not
    reason refuses them, openai/openai-agents-python#569); items appended without their
    response (the Agents SDK's) record none and go to OpenAI's models only
    (:func:`events.models.openai_model`) — never to a Claude or Gemini model behind a Responses
    API. ``events.formats.registry.reasoning_served`` looks ``model_bound`` up."""
    if message.api != target.format or by_policy:
        return "other_provider"
    if not message.model:
        if model_bound:
            return "other_model"
        return None if openai_model(target.model) else "other_provider"
    if not same_model(message.model, target.model):
        return "other_model"
    return None


_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8}|latest)$")


def same_model(recorded: str, requested: str) -> bool:
    """Whether a response's model and a request's name the same model: a response reports the
    dated snapshot (``gpt-5-2025-08-07``, ``claude-sonnet-4-5-20250929``) of the alias asked for."""
    a, b = normalize_model_name(recorded), normalize_model_name(requested)
    return a == b or _SNAPSHOT.sub("", a) == _SNAPSHOT.sub("", b)


def extras_served(message: StoredMessage, target: Target) -> bool:
    """A block's native ``extra`` keys and the message's opaque blocks go only to its own format."""
    return message.api == target.format


def stored_blocks(message: StoredMessage) -> tuple[Block, ...]:
    """The message's blocks: as appended in a native format, or (a Chat Completions message)
    derived from its content and tool calls. A Chat Completions ``reasoning_content`` is not a
    block: it is served only to ``chat_completions`` (by the reasoning policy)."""
    if message.blocks:
        return message.blocks
    out: list[Block] = []
    content = message.content
    if isinstance(content, str):
        if content:
            out.append(TextBlock(content))
    elif isinstance(content, list):  # the transcript's JSON content parts
        for part in content:
            if part.get("type") == "text":
                out.append(TextBlock(part["text"]))
            elif part.get("type") == "image_url":
                image = part["image_url"]
                out.append(MediaBlock("image", url=image["url"], detail=image.get("detail")))
    out.extend(ToolCallBlock(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message.tool_calls)
    return tuple(out)
