"""The type checks every native parser makes of the keys it knows (the provider SDKs' own types:
``anthropic.types``, ``openai.types.responses``, ``google.genai.types``): a known key of the
wrong type is refused with its exact JSON path, so nothing of a type the provider would refuse
is stored and served back to it. Unknown keys stay opaque (kept verbatim, never checked)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

from events.errors import NativeFormatError

__all__ = [
    "ANTHROPIC_BLOCKS", "ANTHROPIC_COUNTS", "ANTHROPIC_MESSAGE", "ANTHROPIC_SOURCES", "ANTHROPIC_USAGE",
    "GEMINI_COUNTS", "GEMINI_DATA", "GEMINI_PART", "RESPONSES_ANY_ITEM", "RESPONSES_ITEMS", "RESPONSES_PARTS",
    "RESPONSES_RESPONSE", "Kinds", "check_counts", "check_fields", "join",
]  # fmt: skip

Kinds: TypeAlias = type | frozenset[str] | tuple[type | frozenset[str] | None, ...]
"""A key's JSON types: ``str``, ``int``, ``bool``, ``list``, ``dict`` (an object), ``None`` (null),
or a set of strings (an enum)."""

# --- the schema of each format: its known keys and their types ---------------------------------

# anthropic.types.Message / Usage: the keys convlog reads, and the other known ones' types.
ANTHROPIC_MESSAGE: Final[Mapping[str, Kinds]] = {
    "id": (str, None), "stop_reason": (str, None), "stop_sequence": (str, None),
    "container": (dict, None),
}  # fmt: skip
ANTHROPIC_COUNTS: Final = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
ANTHROPIC_USAGE: Final[Mapping[str, Kinds]] = {
    "cache_creation": (dict, None), "server_tool_use": (dict, None), "service_tier": (str, None),
    "output_tokens_details": (dict, None),
}  # fmt: skip
# Every block's optional keys (anthropic.types.*BlockParam): a cache breakpoint, citations.
ANTHROPIC_BLOCKS: Final[Mapping[str, Mapping[str, Kinds]]] = {
    "text": {"cache_control": (dict, None), "citations": (list, None)},
    "image": {"cache_control": (dict, None)},
    "document": {"cache_control": (dict, None), "citations": (dict, None), "title": (str, None),
                 "context": (str, None)},
    "tool_use": {"cache_control": (dict, None)},
    "tool_result": {"cache_control": (dict, None)},
}  # fmt: skip
# A media source's keys by its type: base64 and url are modelled, file and text kept opaque.
ANTHROPIC_SOURCES: Final[Mapping[str, Mapping[str, Kinds]]] = {
    "base64": {"media_type": str, "data": str},
    "url": {"url": str},
    "file": {"file_id": str},
    "text": {"media_type": str, "data": str},
    "content": {"content": (str, list)},
}

# openai.types.responses (ResponseOutputMessage, EasyInputMessage,
# ResponseFunctionToolCall, ResponseReasoningItem, ResponseInputItem.FunctionCallOutput, Response).
# An item type convlog does not model is opaque: none of its keys is checked.
_STATUS: Final = frozenset({"in_progress", "completed", "incomplete"})
RESPONSES_ANY_ITEM: Final[Mapping[str, Kinds]] = {"id": str, "status": _STATUS}  # a param's id is no null
RESPONSES_ITEMS: Final[Mapping[str, Mapping[str, Kinds]]] = {
    "message": {**RESPONSES_ANY_ITEM, "phase": (str, None)},
    "function_call": {**RESPONSES_ANY_ITEM, "namespace": (str, None)},
    "function_call_output": RESPONSES_ANY_ITEM,
    "reasoning": {**RESPONSES_ANY_ITEM, "encrypted_content": (str, None), "content": (list, None)},
}
RESPONSES_PARTS: Final[Mapping[str, Mapping[str, Kinds]]] = {
    "input_text": {"text": str},
    "output_text": {"text": str, "annotations": (list, None), "logprobs": (list, None)},
    "input_image": {"image_url": (str, None), "file_id": (str, None), "detail": (str, None)},
    "input_file": {"file_id": (str, None), "file_url": (str, None), "file_data": (str, None), "filename": (str, None)},
    "refusal": {"refusal": str},
}
RESPONSES_RESPONSE: Final[Mapping[str, Kinds]] = {
    "id": (str, None), "model": (str, None), "status": (str, None), "object": str, "incomplete_details": (dict, None),
}  # fmt: skip

# google.genai.types.GenerateContentResponseUsageMetadata's counts (the first four are read).
GEMINI_COUNTS: Final = (
    ("promptTokenCount", "prompt_token_count"), ("candidatesTokenCount", "candidates_token_count"),
    ("cachedContentTokenCount", "cached_content_token_count"), ("thoughtsTokenCount", "thoughts_token_count"),
    ("totalTokenCount", "total_token_count"), ("toolUsePromptTokenCount", "tool_use_prompt_token_count"),
)  # fmt: skip

_OPT_STR: Final = (str, None)
# google.genai.types.Part: the data kept opaque (ExecutableCode, CodeExecutionResult, ToolCall,
# ToolResponse), the modelled calls' other keys, and the part's metadata; both spellings.
GEMINI_DATA: Final[Mapping[str, Mapping[str, Kinds]]] = {
    "executableCode": {"code": _OPT_STR, "language": _OPT_STR, "id": _OPT_STR},
    "codeExecutionResult": {"outcome": _OPT_STR, "output": _OPT_STR, "id": _OPT_STR},
    "toolCall": {"id": _OPT_STR, "toolType": _OPT_STR, "tool_type": _OPT_STR, "args": (dict, None)},
    "toolResponse": {"id": _OPT_STR, "toolType": _OPT_STR, "tool_type": _OPT_STR, "response": (dict, None)},
    "functionCall": {"willContinue": (bool, None), "will_continue": (bool, None), "partialArgs": (list, None),
                     "partial_args": (list, None)},
    "functionResponse": {"willContinue": (bool, None), "will_continue": (bool, None), "scheduling": _OPT_STR,
                         "parts": (list, None)},
}  # fmt: skip
_METADATA: Final = ("videoMetadata", "video_metadata", "partMetadata", "part_metadata", "mediaResolution",
                     "media_resolution")  # fmt: skip
GEMINI_PART: Final[Mapping[str, Kinds]] = dict.fromkeys(_METADATA, (dict, None))


_NAMES = {str: "a string", int: "an integer", bool: "a boolean", list: "a list", dict: "an object", float: "a number"}


def join(at: str, key: str) -> str:
    return f"{at}.{key}" if at else key


def _is(value: Any, kinds: tuple[type | frozenset[str] | None, ...]) -> bool:
    if value is None:
        return None in kinds
    if isinstance(value, bool):  # a JSON true is no integer
        return bool in kinds
    for k in kinds:
        if isinstance(k, frozenset):
            if isinstance(value, str) and value in k:
                return True
        elif k is not None and isinstance(value, Mapping if k is dict else k):
            return True
    return False


def _name(kind: type | frozenset[str] | None) -> str:
    if kind is None:
        return "null"
    if isinstance(kind, frozenset):
        return "one of " + ", ".join(sorted(kind))
    return _NAMES.get(kind, kind.__name__)


def check_fields(obj: Mapping[str, Any], schema: Mapping[str, Kinds], at: str, code: str) -> None:
    """Each key of ``schema`` that ``obj`` has holds one of its kinds; else
    :class:`NativeFormatError` (``code``) at ``at.key``."""
    for key, kinds in schema.items():
        if key in obj:
            allowed = kinds if isinstance(kinds, tuple) else (kinds,)
            if not _is(obj[key], allowed):
                names = " or ".join(_name(k) for k in allowed)
                raise NativeFormatError(f"must be {names}", field=join(at, key), code=code)


def check_counts(obj: Mapping[str, Any], keys: Iterable[str], at: str, code: str) -> None:
    """Each of ``keys`` that ``obj`` has is a token count: a non-negative integer, or null."""
    for key in keys:
        value = obj.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise NativeFormatError("must be a non-negative integer", field=join(at, key), code=code)
