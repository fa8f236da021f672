"""What a served messages array costs in prompt tokens, counted the way OpenAI's cookbook does.

Source: "How to count tokens with tiktoken" (openai/openai-cookbook,
``examples/How_to_count_tokens_with_tiktoken.ipynb``): ``num_tokens_from_messages`` adds
``tokens_per_message`` per message, the tokens of every value, ``tokens_per_name`` for a
``name``, and 3 for the reply priming; ``num_tokens_for_tools`` counts function definitions
with the constants in :data:`TOOL_FORMATS`. Its example conversation costs 129 tokens on
gpt-3.5-turbo/gpt-4 and 124 on gpt-4o/gpt-4o-mini, its tools example 105 and 101, the
figures the API returned (``tests/test_counting.py`` reproduces all four).

What the cookbook does not cover, and is estimated here (documented at each constant):
image parts (``ModelSpec.image_tokens`` each), tool calls inside messages
(:data:`TOOL_CALL_TOKENS`), and nested parameter schemas in tool definitions.

Text is counted with ``encode_ordinary`` (as the projector stores counts): ``"<|endoftext|>"``
in user text is plain text, never a special token, and never raises.

Content text and tool calls are counted as one text, :func:`countable_text` (joined with
``"\\n"``): the projector stores its count per encoding (``StoredMessage.tokens``) and
:func:`count_message` counts the same text, so :func:`message_cost` (the context assembler's
fast path over stored counts) equals :func:`count_message` of the message it serves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import tiktoken

from events.blocks import IMAGE_PLACEHOLDER, Block, drop_images, is_image_part, reasoning_text
from events.strict_json import compact_json
from projectors.tokens.encodings import text_counter
from projectors.tokens.model_table import ModelSpec

__all__ = [
    "IMAGE_PLACEHOLDER",
    "ROLE_TOKENS",
    "TOOL_CALL_TOKENS",
    "TOOL_FORMATS",
    "CountedMessage",
    "ToolFormat",
    "count_message",
    "count_messages",
    "count_tools",
    "countable_reasoning",
    "countable_text",
    "drop_images",
    "image_parts",
    "message_cost",
    "text_message_cost",
]

TOOL_CALL_TOKENS: Final = 3
"""Estimate, per tool call in an assistant message, on top of its function name and arguments.

OpenAI publishes no formula. The one public API measurement we found (gpt-4, Jan 2024,
forestwanglin/openai-java#5: an assistant tool call plus its tool result, 35 prompt tokens)
fits the name and arguments joined with newlines plus 0-1 tokens per call, and shows that
call ids are not counted. 3 (the size of a message frame) leaves room for models whose call
format is unpublished; it over-counts that gpt-4 example by 3."""

ROLE_TOKENS: Final[Mapping[str, int]] = {"system": 1, "developer": 1, "user": 1, "assistant": 1, "tool": 1}
"""Tokens of the role value (the cookbook counts it): 1 each in o200k_base and cl100k_base."""

# Keys of a chat message whose value the model never sees: tool results are matched to their
# call by the API (see TOOL_CALL_TOKENS); ids are not part of the prompt.
_NOT_COUNTED: Final = frozenset({"tool_call_id"})


@dataclass(frozen=True, slots=True)
class ToolFormat:
    """The cookbook's ``num_tokens_for_tools`` constants for one model family."""

    func_init: int  # per function
    prop_init: int  # once per function that has properties
    prop_key: int  # per property
    enum_init: int  # per property with an enum
    enum_item: int  # per enum item
    func_end: int  # once per request that has tools


TOOL_FORMATS: Final[Mapping[str, ToolFormat]] = {
    # the cookbook's "gpt-4o", "gpt-4o-mini" branch (verified: 101 tokens)
    "o200k_base": ToolFormat(func_init=7, prop_init=3, prop_key=3, enum_init=-3, enum_item=3, func_end=12),
    # the cookbook's "gpt-3.5-turbo", "gpt-4" branch (verified: 105 tokens)
    "cl100k_base": ToolFormat(func_init=10, prop_init=3, prop_key=3, enum_init=-3, enum_item=3, func_end=12),
}


class CountedMessage(Protocol):
    """A stored message with its counts picked out for one encoding (``StoredMessage``)."""

    @property
    def role(self) -> str: ...
    @property
    def content(self) -> Any: ...
    @property
    def name(self) -> str | None: ...
    @property
    def tool_calls(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def reasoning_content(self) -> str | None: ...
    @property
    def tokens(self) -> int: ...  # of countable_text(content, tool_calls)
    @property
    def reasoning_tokens(self) -> int: ...
    @property
    def image_count(self) -> int: ...  # image_parts(content)


def _counter(encoding: tiktoken.Encoding) -> Callable[[str], int]:
    return text_counter(encoding.name)


def countable_text(content: Any, tool_calls: Iterable[Mapping[str, Any]]) -> str:
    """The text whose tokens a message's content and tool calls cost (its reasoning is counted
    on its own, images are estimated): the content's text parts, then each call's function
    name and arguments, joined with newlines. The projector stores its count per encoding."""
    return _countable(content, tool_calls)[0]


def countable_reasoning(blocks: Sequence[Block], reasoning_content: str | None) -> str:
    """The reasoning text whose tokens a message's reasoning costs: a native message's visible
    reasoning in its blocks (events.blocks.reasoning_text), else its ``reasoning_content``."""
    if blocks:
        return reasoning_text(blocks)
    return reasoning_content or ""


def image_parts(content: Any) -> int:
    """How many ``image_url`` parts ``content`` has (each costs ``ModelSpec.image_tokens``)."""
    return sum(1 for part in content if is_image_part(part)) if isinstance(content, list) else 0


def _countable(content: Any, tool_calls: Iterable[Mapping[str, Any]]) -> tuple[str, int, list[Any]]:
    """(text, image parts, other parts): the text is :func:`countable_text`."""
    texts: list[str] = []
    images = 0
    others: list[Any] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                texts.append(part["text"])
            elif is_image_part(part):
                images += 1
            else:
                others.append(part)
    for call in tool_calls:
        texts.append(call["function"]["name"])
        texts.append(call["function"]["arguments"])
    return "\n".join(texts), images, others


def count_message(message: Mapping[str, Any], spec: ModelSpec, encoding: tiktoken.Encoding) -> int:
    """Prompt tokens of one OpenAI chat message, as the cookbook counts them:
    ``spec.tokens_per_message`` plus the tokens of every string value (``role``,
    ``reasoning_content``, ...), plus ``spec.tokens_per_name`` for a ``name``.

    Beyond the cookbook (estimates): ``content`` given as parts counts its text parts and
    ``spec.image_tokens`` per ``image_url`` part; ``tool_calls`` count each call's function
    name and arguments plus :data:`TOOL_CALL_TOKENS` (call ids and ``tool_call_id`` are not
    counted: the model does not see them); values that are neither strings nor ``None``
    (unknown content parts, a legacy ``function_call``) count as their compact JSON.
    """
    count = _counter(encoding)
    tool_calls = message.get("tool_calls") or ()
    text, images, others = _countable(message.get("content"), tool_calls)
    total = spec.tokens_per_message + count(text) + images * spec.image_tokens
    total += sum(count(compact_json(part)) for part in others) + TOOL_CALL_TOKENS * len(tool_calls)
    for key, value in message.items():
        if value is None or key in _NOT_COUNTED or key in ("content", "tool_calls"):
            continue
        total += count(value) if isinstance(value, str) else count(compact_json(value))
        if key == "name":
            total += spec.tokens_per_name
    return total


def count_messages(messages: Iterable[Mapping[str, Any]], spec: ModelSpec, encoding: tiktoken.Encoding) -> int:
    """Prompt tokens of a messages array: every message plus ``spec.reply_priming``
    (every reply is primed with ``<|start|>assistant<|message|>``)."""
    return sum(count_message(m, spec, encoding) for m in messages) + spec.reply_priming


def _strip_period(text: str) -> str:
    return text[:-1] if text.endswith(".") else text


def count_tools(tools: Sequence[Mapping[str, Any]], spec: ModelSpec, encoding: tiktoken.Encoding) -> int:
    """Prompt tokens the ``tools`` of a request add, by the cookbook's ``num_tokens_for_tools``:
    per function ``func_init`` + tokens of ``"name:description"`` (one trailing period
    dropped); if it has properties ``prop_init``, and per property ``prop_key`` + tokens of
    ``"key:type:description"``, plus ``enum_init`` and ``enum_item`` + the item's tokens per
    enum value; ``func_end`` once. ``[]`` costs 0. Constants by encoding: :data:`TOOL_FORMATS`.

    Estimates where the cookbook stops: a property's other schema keys (``items``, nested
    ``properties``, ``default``, ...) count as their compact JSON; a tool that is not a
    function counts ``func_init`` + its JSON; a missing description counts as empty.
    """
    if not tools:
        return 0
    fmt = TOOL_FORMATS.get(spec.encoding, TOOL_FORMATS["o200k_base"])
    count = _counter(encoding)
    total = fmt.func_end
    for tool in tools:
        total += fmt.func_init
        function = tool.get("function")
        if tool.get("type", "function") != "function" or not isinstance(function, Mapping):
            total += count(compact_json(tool))
            continue
        total += count(f"{function['name']}:{_strip_period(function.get('description') or '')}")
        properties: Mapping[str, Any] = (function.get("parameters") or {}).get("properties") or {}
        if properties:
            total += fmt.prop_init
        for key, prop in properties.items():
            total += fmt.prop_key
            if "enum" in prop:
                total += fmt.enum_init
                for item in prop["enum"]:
                    total += fmt.enum_item + count(item if isinstance(item, str) else compact_json(item))
            kind = prop.get("type", "")
            kind = " | ".join(map(str, kind)) if isinstance(kind, list) else str(kind)
            total += count(f"{key}:{kind}:{_strip_period(prop.get('description') or '')}")
            extra = {k: v for k, v in prop.items() if k not in ("type", "description", "enum")}
            if extra:
                total += count(compact_json(extra))
    return total


def _frame(role: str, spec: ModelSpec, count: Callable[[str], int]) -> int:
    """A message's overhead and its role."""
    role_tokens = ROLE_TOKENS.get(role)
    return spec.tokens_per_message + (count(role) if role_tokens is None else role_tokens)


def text_message_cost(role: str, text: str, spec: ModelSpec, count: Callable[[str], int]) -> int:
    """What ``{"role": role, "content": text}`` costs (the summary's system message): equal to
    :func:`count_message` of it."""
    return _frame(role, spec, count) + count(text)


def message_cost(
    stored: CountedMessage,
    spec: ModelSpec,
    *,
    include_reasoning: bool,
    keep_images: bool,
    count: Callable[[str], int],
    tool_calls: Sequence[Mapping[str, Any]] | None = None,
) -> int:
    """What ``stored`` costs once served, from its stored counts: equal to
    :func:`count_message` of the served message, i.e. ``role``, ``content`` (with
    :func:`drop_images` applied unless ``keep_images``), ``name`` if set, ``tool_calls``,
    ``reasoning_content`` if ``include_reasoning`` and set.

    ``count`` counts text in the request's encoding (``TokenCounter.count`` bound to it).
    ``tool_calls``, when given, are the calls actually served (an interrupted message loses
    its unfinished ones); the text is then recounted, as it is when images are dropped.
    Everything else is a few dictionary look-ups plus counting the ``name``.
    """
    calls = stored.tool_calls if tool_calls is None else tool_calls
    cost = _frame(stored.role, spec, count)
    if stored.image_count and not keep_images:
        cost += count(_countable(drop_images(stored.content), calls)[0])
    elif tool_calls is not None:
        cost += count(_countable(stored.content, calls)[0]) + stored.image_count * spec.image_tokens
    else:
        cost += stored.tokens + stored.image_count * spec.image_tokens
    cost += TOOL_CALL_TOKENS * len(calls)
    if stored.name:
        cost += count(stored.name) + spec.tokens_per_name
    if include_reasoning and stored.reasoning_content:
        cost += stored.reasoning_tokens
    return cost
