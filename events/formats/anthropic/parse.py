"""Anthropic Messages, append side: a ``Message`` response or ``MessageParam``\\ s to neutral messages.

Accepted payloads (as parsed JSON, or SDK objects, which are ``model_dump``\\ ed first):

- a ``Message`` response (``"type": "message"``): one assistant message, with its ``model``,
  ``usage`` and ``stop_reason``; its ``id`` (``msg_…``) is the payload's native id and
  ``metadata["anthropic.id"]``; ``stop_reason``/``stop_sequence`` are kept in metadata too;
- a ``MessageParam`` (``{"role": "user"|"assistant", "content": str | [blocks]}``), optionally
  with a convlog key ``"model"`` (not Anthropic's): the model that wrote an assistant message.
  Without it, the message's thinking blocks can never be served back (they are bound to it);
- a list of ``MessageParam``\\ s: one atomic batch, in order.

Blocks: ``text`` (``citations`` and any other key in ``extra``), ``image`` and ``document`` with a
``base64``/``url`` source (:class:`MediaBlock`; any other source is opaque), ``tool_use``
(``arguments`` = compact JSON of ``input``), ``thinking`` (text + signature), ``redacted_thinking``
(``redacted_data``); any other type (``server_tool_use``, ``web_search_tool_result``,
``search_result``, future ones) is an :class:`OpaqueBlock`, verbatim. A ``tool_result`` is a
neutral ``tool`` message (``tool_call_id``, ``is_error``, blocks = its content); a user message
is its tool messages first, then a user message with the rest.

Every key this parser knows is type-checked (:mod:`events.formats.anthropic.schema`, after
``anthropic.types``): an image ``source`` that is no object, a ``source.data`` or ``media_type``
that is no string, a ``usage`` count that is no non-negative integer, a ``stop_reason`` that is
no string are refused with their path; unknown keys are kept as they came.

A string ``content`` (and a tool result's absent or empty one) is kept as a sole text block
whose ``extra`` is ``{"convlog.form": "string"|"absent"|"empty"}``, so it renders back as it
came; a tool result's own keys besides ``tool_use_id``/``content``/``is_error`` (``cache_control``)
go to ``metadata["anthropic.tool_result"]`` (kept in the log, not served: the renderer places
its own cache breakpoints).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from events.blocks import native_message
from events.event_types import (
    Block,
    FinishReason,
    MessageAppended,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    Usage,
)
from events.formats import Parsed
from events.formats.anthropic.blocks import PROVIDER, block_object, content_block, fail, json_text, result_block
from events.formats.anthropic.rules import THINKING, thinking_out_of_order
from events.formats.anthropic.schema import ANTHROPIC_COUNTS, ANTHROPIC_MESSAGE, ANTHROPIC_USAGE
from events.formats.schema import check_counts, check_fields
from events.servable import check_nesting
from events.strict_json import compact_json

__all__ = ["FORM_KEY", "PROVIDER", "parse"]

FORM_KEY = "convlog.form"  # the extra key recording a string / absent / empty content

_STOP_REASONS: Mapping[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def _plain(value: object) -> object:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    return value


def form_text(text: str, form: str) -> TextBlock:
    """The sole text block standing for a ``content`` that was not a list of blocks."""
    return TextBlock(text, extra=compact_json({FORM_KEY: form}))


def parse(payload: object, *, new_id: Callable[[], str]) -> Parsed:
    payload = _plain(payload)
    if isinstance(payload, list):
        params = [_plain(p) for p in cast("list[object]", payload)]
        check_nesting(params)
        batch = _Batch(new_id, params)
        return Parsed(batch.run(), answer_paths=batch.answer_paths)
    check_nesting(payload)
    if not isinstance(payload, Mapping):
        raise fail("must be a Message, a MessageParam or a list of MessageParams", "", "invalid_payload")
    doc = cast("Mapping[str, Any]", payload)
    if "type" in doc:
        if doc["type"] != "message":
            raise fail(f"unknown payload type {doc['type']!r} (expected 'message')", "type", "invalid_payload")
        return _response(doc, new_id)
    batch = _Batch(new_id, [doc], prefix="")
    return Parsed(batch.run(), answer_paths=batch.answer_paths)


def _response(doc: Mapping[str, Any], new_id: Callable[[], str]) -> Parsed:
    if doc.get("role") != "assistant":
        raise fail("a Message response is an assistant message", "role", "unknown_role")
    check_fields(doc, ANTHROPIC_MESSAGE, "", "invalid_payload")
    native_id = doc.get("id")
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise fail("a Message names the model that wrote it", "model", "invalid_payload")
    metadata: dict[str, str] = {}
    if native_id:
        metadata["anthropic.id"] = native_id
    stop = doc.get("stop_reason")
    for key in ("stop_reason", "stop_sequence"):
        if isinstance(doc.get(key), str):
            metadata[f"anthropic.{key}"] = doc[key]
    batch = _Batch(new_id, [doc], prefix="")
    (msg,) = batch.run(model=model, usage=_usage(doc.get("usage")), metadata=metadata)
    finish = _STOP_REASONS.get(stop) if isinstance(stop, str) else None
    if finish is not None:
        msg = _with_finish(msg, finish)
    return Parsed((msg,), native_id=native_id or None)


def _with_finish(msg: MessageAppended, finish: FinishReason) -> MessageAppended:
    return native_message(
        message_id=msg.message_id,
        role=msg.role,
        blocks=msg.blocks,
        api="anthropic",
        provider=PROVIDER,
        model=msg.model,
        usage=msg.usage,
        finish_reason=finish,
        metadata=msg.metadata,
    )


def _usage(raw: object) -> Usage | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise fail("must be an object", "usage", "invalid_usage")
    check_counts(raw, ANTHROPIC_COUNTS, "usage", "invalid_usage")
    check_fields(raw, ANTHROPIC_USAGE, "usage", "invalid_usage")
    counts = {k: raw.get(k) for k in ANTHROPIC_COUNTS}
    fresh, read, write = (
        counts.get("input_tokens"),
        counts.get("cache_read_input_tokens"),
        counts.get("cache_creation_input_tokens"),
    )
    prompt = None if fresh is None else fresh + (read or 0) + (write or 0)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=counts.get("output_tokens"),
        cached_tokens=read,
        cache_write_tokens=write,
    )


class _Batch:
    """One payload's messages, checked together: tool_use ids are unique across the payload, and
    a tool_result may not answer a tool_use that comes later in it."""

    def __init__(self, new_id: Callable[[], str], params: Sequence[object], *, prefix: str | None = None) -> None:
        self.new_id = new_id
        self.params = params
        self.prefix = prefix
        self.later_calls: dict[str, int] = {}  # tool_use id -> index of the message holding it
        self.answered: set[str] = set()
        self.answer_paths: dict[str, str] = {}  # tool message id -> its tool_use_id's path (Parsed.answer_paths)

    def path(self, index: int, rest: str) -> str:
        head = f"[{index}]" if self.prefix is None else self.prefix
        return f"{head}.{rest}" if head and rest else head + rest

    def run(
        self, *, model: str | None = None, usage: Usage | None = None, metadata: Mapping[str, str] | None = None
    ) -> tuple[MessageAppended, ...]:
        docs = [self._param(i, p) for i, p in enumerate(self.params)]
        for i, doc in enumerate(docs):
            for j, block in _blocks(doc):
                if isinstance(block, Mapping) and block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                    if block["id"] in self.later_calls:
                        raise fail(
                            f"duplicate tool_use id {block['id']!r}",
                            self.path(i, f"content[{j}].id"),
                            "duplicate_tool_use_id",
                        )
                    self.later_calls[block["id"]] = i
        out: list[MessageAppended] = []
        for i, doc in enumerate(docs):
            out.extend(self._message(i, doc, model=model, usage=usage, metadata=metadata))
        return tuple(out)

    def _param(self, index: int, raw: object) -> Mapping[str, Any]:
        if not isinstance(raw, Mapping):
            raise fail("must be a MessageParam object", self.path(index, ""), "invalid_payload")
        doc = cast("Mapping[str, Any]", raw)
        role = doc.get("role")
        if role not in ("user", "assistant"):
            raise fail(
                f"unknown role {role!r}: messages are user or assistant (system is a top-level parameter)",
                self.path(index, "role"),
                "unknown_role",
            )
        content = doc.get("content")
        if not isinstance(content, str | list):
            raise fail("must be a string or a list of content blocks", self.path(index, "content"), "invalid_content")
        if not content:
            raise fail("must not be empty", self.path(index, "content"), "empty_content")
        model = doc.get("model")
        if model is not None and not (isinstance(model, str) and model):
            raise fail("must be a non-empty string", self.path(index, "model"), "invalid_payload")
        return doc

    def _message(
        self,
        index: int,
        doc: Mapping[str, Any],
        *,
        model: str | None,
        usage: Usage | None,
        metadata: Mapping[str, str] | None,
    ) -> list[MessageAppended]:
        role = doc["role"]
        model = model or doc.get("model")
        content = doc["content"]
        if isinstance(content, str):
            blocks: list[Block] = [form_text(content, "string")]
            return [self._neutral(role, blocks, model=model, usage=usage, metadata=metadata)]
        out: list[MessageAppended] = []
        blocks = []
        seen_other = False
        for j, raw in enumerate(cast("list[object]", content)):
            field = self.path(index, f"content[{j}]")
            block = block_object(raw, field)
            kind = block["type"]
            if kind == "tool_result":
                if role == "assistant":
                    raise fail(
                        "tool_result blocks belong in a user message", f"{field}.type", "tool_result_in_assistant"
                    )
                if seen_other:
                    raise fail(
                        "tool_result blocks come first in a user message, before any other block",
                        field,
                        "tool_result_not_first",
                    )
                out.append(self._tool_result(index, block, field))
                continue
            seen_other = True
            if role == "user" and (kind == "tool_use" or kind in THINKING):
                raise fail(f"{kind} blocks belong in an assistant message", f"{field}.type", f"{kind}_in_user")
            blocks.append(content_block(block, field))
        if role == "assistant":
            _check_thinking_order(blocks, self.path(index, "content"))
        if blocks:
            out.append(self._neutral(role, blocks, model=model, usage=usage, metadata=metadata))
        return out

    def _neutral(
        self,
        role: str,
        blocks: Sequence[Block],
        *,
        model: str | None,
        usage: Usage | None,
        metadata: Mapping[str, str] | None,
    ) -> MessageAppended:
        assistant = role == "assistant"
        return native_message(
            message_id=self.new_id(),
            role="assistant" if assistant else "user",
            blocks=blocks,
            api="anthropic",
            provider=PROVIDER,
            model=model if assistant else None,
            usage=usage if assistant else None,
            finish_reason="tool_calls" if assistant and any(isinstance(b, ToolCallBlock) for b in blocks) else None,
            metadata=metadata if assistant else None,
        )

    def _tool_result(self, index: int, block: Mapping[str, Any], field: str) -> MessageAppended:
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            raise fail("must be the id of the tool_use it answers", f"{field}.tool_use_id", "invalid_block")
        if self.later_calls.get(call_id, -1) >= index:
            raise fail(
                f"answers tool_use {call_id!r}, which comes later in the payload",
                f"{field}.tool_use_id",
                "tool_result_before_tool_use",
            )
        if call_id in self.answered:
            raise fail(f"a second tool_result for {call_id!r}", f"{field}.tool_use_id", "duplicate_tool_result")
        self.answered.add(call_id)
        is_error = block.get("is_error")
        if is_error is not None and not isinstance(is_error, bool):
            raise fail("must be a boolean", f"{field}.is_error", "invalid_block")
        content = block.get("content", None)
        blocks: list[Block]
        if "content" not in block:
            blocks = [form_text("", "absent")]
        elif isinstance(content, str):
            blocks = [form_text(content, "string")]
        elif isinstance(content, list):
            blocks = [result_block(raw, f"{field}.content[{k}]") for k, raw in enumerate(content)]
            blocks = blocks or [form_text("", "empty")]
        else:
            raise fail("must be a string or a list of blocks", f"{field}.content", "invalid_content")
        rest = {k: v for k, v in block.items() if k not in ("type", "tool_use_id", "content", "is_error")}
        message_id = self.new_id()
        self.answer_paths[message_id] = f"{field}.tool_use_id"
        return native_message(
            message_id=message_id,
            role="tool",
            blocks=blocks,
            api="anthropic",
            provider=PROVIDER,
            tool_call_id=call_id,
            is_error=is_error,
            metadata={"anthropic.tool_result": json_text(rest, field)} if rest else None,
        )


def _blocks(doc: Mapping[str, Any]) -> list[tuple[int, object]]:
    content = doc["content"]
    return list(enumerate(content)) if isinstance(content, list) else []


def _check_thinking_order(blocks: Sequence[Block], field: str) -> None:
    """Thinking comes before the tool calls it led to (Anthropic refuses it after them): the
    rule's append-side strictness (:func:`~events.formats.anthropic.rules.thinking_out_of_order`)."""
    kinds = [
        "tool_use" if isinstance(b, ToolCallBlock) else "thinking" if isinstance(b, ReasoningBlock) else ""
        for b in blocks
    ]
    j = thinking_out_of_order(kinds, thinking_first=False)
    if j is not None:
        raise fail("a thinking block after a tool_use block", f"{field}[{j}]", "thinking_after_tool_use")
