"""The keys the parser of the Responses API (``openai.types.responses``) knows, and their JSON types: what
:func:`events.formats.schema.check_fields` checks a payload against."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from events.formats.schema import Kinds

__all__ = [
    "RESPONSES_ANY_ITEM",
    "RESPONSES_ITEMS",
    "RESPONSES_PARTS",
    "RESPONSES_RESPONSE",
]

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
    "id": (str, None),
    "model": (str, None),
    "status": (str, None),
    "object": str,
    "incomplete_details": (dict, None),
}
