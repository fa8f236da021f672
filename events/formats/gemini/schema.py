"""The keys the parser of Gemini (``google.genai.types``) knows, and their JSON types: what
:func:`events.formats.schema.check_fields` checks a payload against."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from events.formats.schema import Kinds

__all__ = [
    "GEMINI_COUNTS",
    "GEMINI_DATA",
    "GEMINI_PART",
]

# google.genai.types.GenerateContentResponseUsageMetadata's counts (the first four are read).
GEMINI_COUNTS: Final = (
    ("promptTokenCount", "prompt_token_count"),
    ("candidatesTokenCount", "candidates_token_count"),
    ("cachedContentTokenCount", "cached_content_token_count"),
    ("thoughtsTokenCount", "thoughts_token_count"),
    ("totalTokenCount", "total_token_count"),
    ("toolUsePromptTokenCount", "tool_use_prompt_token_count"),
)

_OPT_STR: Final = (str, None)
# google.genai.types.Part: the data kept opaque (ExecutableCode, CodeExecutionResult, ToolCall,
# ToolResponse), the modelled calls' other keys, and the part's metadata; both spellings.
GEMINI_DATA: Final[Mapping[str, Mapping[str, Kinds]]] = {
    "executableCode": {"code": _OPT_STR, "language": _OPT_STR, "id": _OPT_STR},
    "codeExecutionResult": {"outcome": _OPT_STR, "output": _OPT_STR, "id": _OPT_STR},
    "toolCall": {"id": _OPT_STR, "toolType": _OPT_STR, "tool_type": _OPT_STR, "args": (dict, None)},
    "toolResponse": {"id": _OPT_STR, "toolType": _OPT_STR, "tool_type": _OPT_STR, "response": (dict, None)},
    "functionCall": {
        "willContinue": (bool, None),
        "will_continue": (bool, None),
        "partialArgs": (list, None),
        "partial_args": (list, None),
    },
    "functionResponse": {
        "willContinue": (bool, None),
        "will_continue": (bool, None),
        "scheduling": _OPT_STR,
        "parts": (list, None),
    },
}
_METADATA: Final = (
    "videoMetadata",
    "video_metadata",
    "partMetadata",
    "part_metadata",
    "mediaResolution",
    "media_resolution",
)
GEMINI_PART: Final[Mapping[str, Kinds]] = dict.fromkeys(_METADATA, (dict, None))
