"""Pydantic AI messages -> convlog appends (no I/O here; loading back: ``pydantic_ai_served``).

Each ``ModelMessage`` becomes one append (one atomic batch) in the format that keeps the most
of it:

- a ``ModelResponse`` carrying Anthropic thinking (a ``ThinkingPart`` with a ``signature`` and
  ``provider_name="anthropic"``, or redacted thinking) or made by Anthropic is an Anthropic
  ``Message`` (``format=anthropic``): thinking with its signature, redacted thinking, text and
  ``tool_use`` blocks, the model (thinking is bound to it) and the usage;
- a ``ModelResponse`` of the Responses API (OpenAI parts with item ids ``rs_…``/``msg_…``/``fc_…``,
  or a ``ThinkingPart`` whose ``signature`` is the encrypted content) is a Responses ``Response``
  (``format=responses``): the reasoning item (summaries, ``encrypted_content``), assistant
  messages and ``function_call`` items with their ids, model and usage;
- any other ``ModelResponse`` is a Chat Completions assistant message: text, tool calls,
  unsigned thinking as ``reasoning_content``, model, usage, finish reason;
- a ``ModelRequest`` is a list of Chat Completions messages: system prompts, user prompts (text
  and images), tool returns as tool messages (their text as the model sees it:
  ``model_response_str()``), retry feedback without a tool as user text; a request with a failed
  or retried tool return is an Anthropic user message instead, whose ``tool_result`` keeps
  ``is_error`` (Chat Completions has no such flag) with the ``{"error": ...}`` text an OpenAI
  model reads.

Instructions and other bookkeeping parts are not stored: the agent recomputes them every run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic_ai.messages import (
    ERROR_OUTCOMES,
    BinaryContent,
    ImageUrl,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)

from events.errors import InvalidEventError

__all__ = [
    "ANTHROPIC",
    "LOADED_KEY",
    "OPENAI",
    "REDACTED_THINKING_ID",
    "Append",
    "Format",
    "append_for",
    "idempotency_key",
    "is_loaded",
    "unsupported",
]

LOADED_KEY = "convlog.loaded"
"""The ``metadata`` key of a message that came from convlog (``load``): never stored again."""

ANTHROPIC = "anthropic"
REDACTED_THINKING_ID = "redacted_thinking"  # Pydantic AI's id for Anthropic's redacted thinking
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_call": "tool_use", "content_filter": "refusal"}
_FINISH_REASONS = {"stop": "stop", "length": "length", "tool_call": "tool_calls", "content_filter": "content_filter"}

OPENAI = "openai"
Format = Literal["anthropic", "responses", "chat_completions"]


def unsupported(part: object, where: str) -> InvalidEventError:
    """A part this adapter cannot store without losing it (audio, documents, server-side tools):
    refused before anything of the save is sent, as the producer refuses an invalid event."""
    return InvalidEventError(f"{where} {type(part).__name__} cannot be stored by convlog yet", field="parts")


@dataclass(frozen=True, slots=True)
class Append:
    """One convlog append: the payload in ``format``."""

    format: Format
    payload: Any


def is_loaded(message: ModelMessage) -> bool:
    return bool(message.metadata and message.metadata.get(LOADED_KEY))


def idempotency_key(message: ModelMessage) -> str:
    """Derived from the whole message as Pydantic AI serialises it (parts, timestamps, run id):
    the same message saved twice is one append, two equal texts sent at two times are two."""
    digest = hashlib.sha256(ModelMessagesTypeAdapter.dump_json([message])).hexdigest()
    return f"pydantic-ai-{digest[:40]}"


def append_for(message: ModelMessage) -> Append | None:
    """The append storing ``message`` (None: nothing in it is history, e.g. only instructions)."""
    if isinstance(message, ModelResponse):
        if _is_anthropic(message):
            return Append("anthropic", _anthropic_response(message))
        if _is_openai_responses(message):
            return Append("responses", _responses_response(message))
        return Append("chat_completions", _chat_response(message))
    if any(_is_error(p) for p in message.parts) and not any(isinstance(p, SystemPromptPart) for p in message.parts):
        return Append("anthropic", {"role": "user", "content": _anthropic_request_blocks(message.parts)})
    rows = [row for part in message.parts if (row := _request_row(part)) is not None]
    return Append("chat_completions", rows) if rows else None


# --- saving -------------------------------------------------------------------------------


def _is_anthropic(message: ModelResponse) -> bool:
    if message.provider_name == ANTHROPIC:
        return True
    return any(isinstance(p, ThinkingPart) and p.signature and p.provider_name == ANTHROPIC for p in message.parts)


# The ids Pydantic AI's Chat Completions model gives its parts: not Responses item ids.
_CHAT_IDS = frozenset({None, "content", "reasoning", "reasoning_content"})


def _is_openai_responses(message: ModelResponse) -> bool:
    """Made by the Responses API: OpenAI parts carrying item ids (``rs_…``, ``msg_…``, ``fc_…``) or
    encrypted reasoning."""
    return any(
        isinstance(p, ThinkingPart | TextPart | ToolCallPart)
        and p.provider_name == OPENAI
        and (p.id not in _CHAT_IDS or (isinstance(p, ThinkingPart) and bool(p.signature)))
        for p in message.parts
    )


def _responses_response(message: ModelResponse) -> dict[str, Any]:
    """A Response object: Pydantic AI's parts back to the output items they were read from (the
    summaries of one reasoning item share its id; the first carries the encrypted content)."""
    items: list[dict[str, Any]] = []
    reasoning: dict[str, Any] | None = None
    for part in message.parts:
        if isinstance(part, ThinkingPart):
            if reasoning is None or (part.id and part.id != reasoning["id"]):
                reasoning = {"type": "reasoning", "id": part.id or "rs_convlog", "summary": []}
                items.append(reasoning)
            if part.signature:
                reasoning["encrypted_content"] = part.signature
            if part.content:
                reasoning["summary"].append({"type": "summary_text", "text": part.content})
            continue
        reasoning = None
        if isinstance(part, TextPart):
            text = {"type": "output_text", "text": part.content, "annotations": []}
            item: dict[str, Any] = {"type": "message", "role": "assistant", "status": "completed", "content": [text]}
        elif isinstance(part, ToolCallPart):
            item = {
                "type": "function_call",
                "call_id": part.tool_call_id,
                "name": part.tool_name,
                "arguments": part.args_as_json_str(),
                "status": "completed",
            }
        else:
            raise unsupported(part, "a response's")
        if part.id:
            item["id"] = part.id
        items.append(item)
    doc: dict[str, Any] = {"object": "response", "status": "completed", "output": items}
    if message.model_name:
        doc["model"] = message.model_name
    if message.provider_response_id:
        doc["id"] = message.provider_response_id
    counts = _usage_counts(message)
    if counts is not None:
        doc["usage"] = {"input_tokens": counts[0], "output_tokens": counts[1]}
    return doc


def _is_error(part: ModelRequestPart) -> bool:
    if isinstance(part, ToolReturnPart):
        return part.outcome in ERROR_OUTCOMES
    return isinstance(part, RetryPromptPart) and part.tool_name is not None


def _anthropic_request_blocks(parts: Sequence[ModelRequestPart]) -> list[dict[str, Any]]:
    """Tool results first (Anthropic's rule), then the prompts, as Chat Completions rows would be."""
    results: list[dict[str, Any]] = []
    rest: list[dict[str, Any]] = []
    for part in parts:
        row = _request_row(part)
        if row is None:
            continue
        if row["role"] == "tool":
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": row["tool_call_id"],
                    "content": row["content"],
                    "is_error": _is_error(part),
                }
            )
        elif isinstance(row["content"], str):
            rest.append({"type": "text", "text": row["content"]})
        else:
            rest.extend(_anthropic_user_block(p) for p in row["content"])
    return results + rest


def _anthropic_user_block(part: Mapping[str, Any]) -> dict[str, Any]:
    if part["type"] != "image_url":
        return dict(part)
    url = str(part["image_url"]["url"])
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _request_row(part: ModelRequestPart) -> dict[str, Any] | None:
    if isinstance(part, SystemPromptPart):
        return {"role": "system", "content": part.content}
    if isinstance(part, UserPromptPart):
        return {"role": "user", "content": _user_content(part.content)}
    if isinstance(part, ToolReturnPart):
        return {"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response_str()}
    if isinstance(part, RetryPromptPart):
        if part.tool_name is None:
            return {"role": "user", "content": part.model_response()}
        return {"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response()}
    if isinstance(part, RetryFeedbackPart):  # output validation feedback, sent as user text
        return {"role": "user", "content": part.model_response()}
    # Instructions, deltas and other bookkeeping parts are recomputed by the agent on every run.
    return None


def _user_content(content: str | Sequence[UserContent]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for item in content:
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif isinstance(item, TextContent):
            parts.append({"type": "text", "text": item.content})
        elif isinstance(item, ImageUrl):
            parts.append({"type": "image_url", "image_url": {"url": item.url}})
        elif isinstance(item, BinaryContent) and item.is_image:
            parts.append({"type": "image_url", "image_url": {"url": item.data_uri}})
        else:
            raise unsupported(item, "a user prompt's")
    return parts


def _usage_counts(message: ModelResponse) -> tuple[int, int, int, int] | None:
    u = message.usage
    if not (u.input_tokens or u.output_tokens):
        return None
    return u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens


def _anthropic_response(message: ModelResponse) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, ThinkingPart):
            if part.signature and part.provider_name == ANTHROPIC:
                if part.id == REDACTED_THINKING_ID:
                    blocks.append({"type": "redacted_thinking", "data": part.signature})
                else:
                    blocks.append({"type": "thinking", "thinking": part.content, "signature": part.signature})
            # Unsigned thinking cannot go back to Anthropic as thinking; Pydantic AI would replay it
            # as text, which is not history the model wrote: it is not stored.
        else:
            blocks.extend(_anthropic_block(part))
    doc: dict[str, Any] = {
        "type": "message",
        "role": "assistant",
        "model": message.model_name or ANTHROPIC,
        "content": blocks or [{"type": "text", "text": ""}],
    }
    if message.finish_reason in _STOP_REASONS:
        doc["stop_reason"] = _STOP_REASONS[message.finish_reason]
    counts = _usage_counts(message)
    if counts is not None:
        total, out, read, write = counts
        # Pydantic AI's input_tokens include the cache reads and writes; Anthropic's do not.
        doc["usage"] = {
            "input_tokens": max(total - read - write, 0),
            "output_tokens": out,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
        }
    return doc


def _anthropic_block(part: ModelResponsePart) -> list[dict[str, Any]]:
    if isinstance(part, TextPart):
        return [{"type": "text", "text": part.content}] if part.content else []
    if isinstance(part, ToolCallPart):
        return [{"type": "tool_use", "id": part.tool_call_id, "name": part.tool_name, "input": part.args_as_dict()}]
    raise unsupported(part, "a response's")


def _chat_response(message: ModelResponse) -> dict[str, Any]:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            texts.append(part.content)
        elif isinstance(part, ThinkingPart):
            if part.content:
                thinking.append(part.content)
        elif isinstance(part, ToolCallPart):
            calls.append(
                {
                    "id": part.tool_call_id,
                    "type": "function",
                    "function": {"name": part.tool_name, "arguments": part.args_as_json_str()},
                }
            )
        else:
            raise unsupported(part, "a response's")
    # Pydantic AI's OpenAI model joins several text parts the same way.
    doc: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) if texts else None}
    if calls:
        doc["tool_calls"] = calls
    if thinking:
        doc["reasoning_content"] = "\n\n".join(thinking)
    if message.model_name:
        doc["model"] = message.model_name
    if message.finish_reason in _FINISH_REASONS:
        doc["finish_reason"] = _FINISH_REASONS[message.finish_reason]
    counts = _usage_counts(message)
    if counts is not None:
        doc["usage"] = {"prompt_tokens": counts[0], "completion_tokens": counts[1]}
    return doc
