"""Gemini's key maps and marks, stated once for the parser, the renderer and the rules.

Gemini takes every key in camelCase (its REST API) or snake_case (the Python SDK's ``model_dump``):
:data:`SNAKE` maps the keys convlog models, :data:`OPAQUE_DATA` the part data it keeps opaque;
a stored block's extra records the spelling a part came in (:data:`KEYS_MARK`) so it renders
back as it came.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from events.errors import NativeFormatError
from events.servable import RESPONSE_MARK  # in a tool message's extra: its response was an object

__all__ = [
    "DATA_KEYS",
    "KEYS_MARK",
    "MODELLED_DATA",
    "NO_ARGS_MARK",
    "OPAQUE_DATA",
    "RESPONSE_MARK",
    "SIGNATURE",
    "SIGNATURE_KEYS",
    "SNAKE",
    "Keys",
    "either",
    "is_base64",
]

# camelCase -> snake_case of every key convlog models (the other keys are kept as they came).
SNAKE: Final[Mapping[str, str]] = {
    "thoughtSignature": "thought_signature",
    "inlineData": "inline_data",
    "fileData": "file_data",
    "functionCall": "function_call",
    "functionResponse": "function_response",
    "mimeType": "mime_type",
    "fileUri": "file_uri",
    "displayName": "display_name",
}
KEYS_MARK: Final = "$keys"  # in a block's extra: "snake_case" when the part came so
NO_ARGS_MARK: Final = "$args"  # in a call's extra: "absent" when the functionCall had no args

MODELLED_DATA: Final = ("text", "inlineData", "fileData", "functionCall", "functionResponse")
OPAQUE_DATA: Final[Mapping[str, str]] = {
    "executableCode": "executable_code",
    "codeExecutionResult": "code_execution_result",
    "toolCall": "tool_call",
    "toolResponse": "tool_response",
}
"""The part data convlog keeps opaque (camelCase -> snake_case): with :data:`DATA_KEYS`'s modelled
ones, every kind of data a Part holds (google.genai.types.Part); a part with none is refused."""
DATA_KEYS: Final = (*MODELLED_DATA, *OPAQUE_DATA)
SIGNATURE: Final = "thoughtSignature"
SIGNATURE_KEYS: Final = frozenset({SIGNATURE, SNAKE[SIGNATURE]})
"""A part's thought signature, in either spelling."""
_EITHER: Final[Mapping[str, str]] = {**SNAKE, **OPAQUE_DATA}


def either(obj: Mapping[str, Any], camel: str) -> Any:
    """``obj``'s value of ``camel`` in either spelling (None when absent)."""
    if camel in obj:
        return obj[camel]
    return obj.get(_EITHER.get(camel, camel))


# Proto JSON bytes (thoughtSignature, inlineData.data): standard or URL-safe base64. Gemini
# answers 400 "Base64 decoding failed" for anything else, turns later; refused on append.
_BASE64: Final = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")


def is_base64(value: object) -> bool:
    return isinstance(value, str) and _BASE64.fullmatch(value) is not None


class Keys:
    """Reads one JSON object's keys in either spelling and remembers which were used."""

    def __init__(self, obj: Mapping[str, Any], field: str) -> None:
        self.obj = obj
        self.field = field
        self.used: set[str] = set()
        self.snake = False

    def get(self, camel: str) -> tuple[str, Any]:
        """``(json path, value)`` of ``camel`` or its snake_case spelling; value None if absent."""
        snake = SNAKE.get(camel, camel)
        if camel in self.obj and snake != camel and snake in self.obj:
            raise NativeFormatError(
                f"both {camel} and {snake} are set", field=f"{self.field}.{snake}", code="duplicate_field"
            )
        key = snake if snake in self.obj and snake != camel else camel
        if key in self.obj:
            self.used.add(key)
            self.snake = self.snake or key != camel
        return f"{self.field}.{key}", self.obj.get(key)

    def leftover(self) -> dict[str, Any]:
        return {k: v for k, v in self.obj.items() if k not in self.used}
