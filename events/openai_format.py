"""Conversions from OpenAI Chat Completions shapes to the event model.

Chat apps already hold messages, tool calls and usage in OpenAI's format; these helpers let
them hand those over as they are. Every problem raises :class:`InvalidEventError` with the
path of the offending field (``tool_calls[1].function.arguments``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from events.errors import InvalidEventError
from events.event_types import (
    FINISH_REASONS,
    ROLES,
    Content,
    ContentPart,
    FinishReason,
    ImageDetail,
    ImagePart,
    MessageAppended,
    Role,
    TextPart,
    ToolCall,
    Usage,
)
from events.strict_json import NotJsonError, dump_json

ContentInput = str | Sequence[ContentPart | Mapping[str, Any]] | None
ToolCallInput = ToolCall | Mapping[str, Any]
UsageInput = Usage | Mapping[str, Any] | None


def content_from_openai(content: ContentInput, *, field: str = "content") -> Content:
    if content is None or isinstance(content, str):
        return content
    if not _is_list(content):
        raise InvalidEventError("must be a string or a list of content parts", field=field)
    return tuple(_part(p, f"{field}[{i}]") for i, p in enumerate(cast("Sequence[Any]", content)))


def _part(part: ContentPart | Mapping[str, Any], field: str) -> ContentPart:
    if isinstance(part, TextPart | ImagePart):
        return part
    if not isinstance(part, Mapping):
        raise InvalidEventError("must be a content part object", field=field)
    kind = part.get("type")
    if kind == "text":
        return TextPart(_str(part.get("text"), f"{field}.text"))
    if kind == "image_url":
        image = part.get("image_url")
        if not isinstance(image, Mapping):
            raise InvalidEventError("must be an object with a url", field=f"{field}.image_url")
        detail = image.get("detail", "auto")
        if detail not in ("auto", "low", "high"):
            raise InvalidEventError("must be auto, low or high", field=f"{field}.image_url.detail")
        return ImagePart(_str(image.get("url"), f"{field}.image_url.url"), cast("ImageDetail", detail))
    raise InvalidEventError(f"unsupported content part type {kind!r} (text, image_url)", field=f"{field}.type")


def tool_calls_from_openai(calls: Sequence[ToolCallInput] | None, *, field: str = "tool_calls") -> tuple[ToolCall, ...]:
    if calls is None:
        return ()
    if not _is_list(calls):
        raise InvalidEventError("must be a list", field=field)
    return tuple(_tool_call(c, f"{field}[{i}]") for i, c in enumerate(calls))


def _tool_call(call: ToolCallInput, field: str) -> ToolCall:
    if isinstance(call, ToolCall):
        return call
    if not isinstance(call, Mapping):
        raise InvalidEventError("must be a tool call object", field=field)
    if call.get("type", "function") != "function":
        raise InvalidEventError("only function tool calls are supported", field=f"{field}.type")
    function = call.get("function")
    if not isinstance(function, Mapping):
        raise InvalidEventError("must be an object with name and arguments", field=f"{field}.function")
    arguments = function.get("arguments", "")
    if isinstance(arguments, Mapping):  # a convenience: already-parsed arguments are serialised
        try:
            arguments = dump_json(arguments)
        except NotJsonError as e:
            raise InvalidEventError(str(e), field=f"{field}.function.arguments") from e
    return ToolCall(
        id=_str(call.get("id"), f"{field}.id"),
        name=_str(function.get("name"), f"{field}.function.name"),
        arguments=_str(arguments, f"{field}.function.arguments"),
    )


def usage_from_openai(usage: UsageInput, *, field: str = "usage") -> Usage | None:
    """Accepts a :class:`Usage` or OpenAI's usage object (with its ``*_details`` sub-objects)."""
    if usage is None or isinstance(usage, Usage):
        return usage
    if not isinstance(usage, Mapping):
        raise InvalidEventError("must be an object", field=field)
    prompt_details = _opt_object(usage.get("prompt_tokens_details"), f"{field}.prompt_tokens_details")
    completion_details = _opt_object(usage.get("completion_tokens_details"), f"{field}.completion_tokens_details")
    return Usage(
        prompt_tokens=_opt_int(usage.get("prompt_tokens"), f"{field}.prompt_tokens"),
        completion_tokens=_opt_int(usage.get("completion_tokens"), f"{field}.completion_tokens"),
        cached_tokens=_opt_int(
            usage.get("cached_tokens", prompt_details.get("cached_tokens")), f"{field}.cached_tokens"
        ),
        reasoning_tokens=_opt_int(
            usage.get("reasoning_tokens", completion_details.get("reasoning_tokens")),
            f"{field}.reasoning_tokens",
        ),
    )


def message_from_openai(message: Mapping[str, Any], *, message_id: str) -> MessageAppended:
    """Build a :class:`MessageAppended` from an OpenAI chat message plus convlog's optional extras
    (``reasoning_content``, ``thinking_duration_ms``, ``model``, ``usage``, ``finish_reason``,
    ``metadata``). Validation of the combination happens in :func:`events.validation.validate_message`.
    """
    if not isinstance(message, Mapping):
        raise InvalidEventError("must be a message object", field="message")
    role = message.get("role")
    if role is None and ("choices" in message or message.get("object") == "chat.completion"):
        raise InvalidEventError(
            "this is a whole ChatCompletion, not a message: append its choices[0].message, "
            "with its finish_reason, model and usage (ConversationProducer.append_completion does that)",
            field="choices",
        )
    if role not in ROLES:
        raise InvalidEventError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}", field="role")
    finish_reason = message.get("finish_reason")
    if finish_reason is not None and finish_reason not in FINISH_REASONS:
        raise InvalidEventError(f"unknown finish_reason {finish_reason!r}", field="finish_reason")
    metadata = _opt_object(message.get("metadata"), "metadata")
    return MessageAppended(
        message_id=message_id,
        role=cast("Role", role),
        content=content_from_openai(message.get("content")),
        name=_opt_str(message.get("name"), "name"),
        tool_calls=tool_calls_from_openai(message.get("tool_calls")),
        tool_call_id=_opt_str(message.get("tool_call_id"), "tool_call_id"),
        reasoning_content=_opt_str(message.get("reasoning_content"), "reasoning_content"),
        thinking_duration_ms=_opt_int(message.get("thinking_duration_ms"), "thinking_duration_ms"),
        model=_opt_str(message.get("model"), "model"),
        usage=usage_from_openai(message.get("usage")),
        finish_reason=cast("FinishReason | None", finish_reason),
        metadata=dict(metadata),
    )


def requested_message_id(message: Mapping[str, Any]) -> str | None:
    """The ``message_id`` a message names for itself, if any (else the caller picks one)."""
    if not isinstance(message, Mapping):
        raise InvalidEventError("must be a message object", field="message")
    return _opt_str(message.get("message_id"), "message_id")


def _is_list(value: object) -> bool:
    """JSON input can put anything anywhere: a string is a sequence too, but not a list of parts."""
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _str(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidEventError("must be a string", field=field)
    return value


def _opt_str(value: object, field: str) -> str | None:
    return None if value is None else _str(value, field)


def _opt_object(value: object, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidEventError("must be an object", field=field)
    return value


def _opt_int(value: object, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidEventError("must be an integer", field=field)
    return value


def completion_message(completion: Mapping[str, Any] | Any, *, choice: int = 0) -> dict[str, Any]:
    """The assistant message of a Chat Completions response, with what convlog keeps beside it:
    ``finish_reason``, ``model``, ``usage`` and (DeepSeek and others) ``reasoning_content``.

    ``completion`` is the ``openai`` SDK's ``ChatCompletion`` (anything with ``model_dump()``)
    or the response's JSON as a dict; convlog does not import the SDK for it."""
    doc = completion.model_dump() if hasattr(completion, "model_dump") else completion
    if not isinstance(doc, Mapping):
        raise InvalidEventError("expected a ChatCompletion or its JSON object", field="completion")
    raw = doc.get("choices")
    choices: list[Any] = list(raw) if isinstance(raw, Sequence) and not isinstance(raw, str | bytes) else []
    if not 0 <= choice < len(choices):
        raise InvalidEventError(f"no choice {choice} among {len(choices)}", field="completion.choices")
    picked = choices[choice]
    message = picked.get("message") if isinstance(picked, Mapping) else None
    if not isinstance(message, Mapping):
        raise InvalidEventError("the choice has no message", field=f"completion.choices[{choice}].message")
    finish_reason = picked.get("finish_reason")
    if finish_reason == "function_call":
        raise InvalidEventError(
            "legacy function_call responses are not supported: use tools / tool_calls",
            field=f"completion.choices[{choice}].finish_reason",
        )
    out: dict[str, Any] = {
        "role": "assistant",
        "content": message.get("content"),
        "tool_calls": message.get("tool_calls") or None,
        "reasoning_content": message.get("reasoning_content"),
        "finish_reason": finish_reason,
        "model": doc.get("model"),
        "usage": doc.get("usage"),
    }
    if message.get("refusal") and not out["content"]:
        out["content"] = message["refusal"]  # what the user was shown
    return {k: v for k, v in out.items() if v is not None}
