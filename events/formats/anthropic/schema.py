"""The keys the parser of Anthropic Messages (``anthropic.types``) knows, and their JSON types: what
:func:`events.formats.schema.check_fields` checks a payload against."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from events.formats.schema import Kinds

__all__ = [
    "ANTHROPIC_BLOCKS",
    "ANTHROPIC_COUNTS",
    "ANTHROPIC_MESSAGE",
    "ANTHROPIC_SOURCES",
    "ANTHROPIC_USAGE",
]

# anthropic.types.Message / Usage: the keys convlog reads, and the other known ones' types.
ANTHROPIC_MESSAGE: Final[Mapping[str, Kinds]] = {
    "id": (str, None),
    "stop_reason": (str, None),
    "stop_sequence": (str, None),
    "container": (dict, None),
}
ANTHROPIC_COUNTS: Final = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
ANTHROPIC_USAGE: Final[Mapping[str, Kinds]] = {
    "cache_creation": (dict, None),
    "server_tool_use": (dict, None),
    "service_tier": (str, None),
    "output_tokens_details": (dict, None),
}
# Every block's optional keys (anthropic.types.*BlockParam): a cache breakpoint, citations.
ANTHROPIC_BLOCKS: Final[Mapping[str, Mapping[str, Kinds]]] = {
    "text": {"cache_control": (dict, None), "citations": (list, None)},
    "image": {"cache_control": (dict, None)},
    "document": {
        "cache_control": (dict, None),
        "citations": (dict, None),
        "title": (str, None),
        "context": (str, None),
    },
    "tool_use": {"cache_control": (dict, None)},
    "tool_result": {"cache_control": (dict, None)},
}
# A media source's keys by its type: base64 and url are modelled, file and text kept opaque.
ANTHROPIC_SOURCES: Final[Mapping[str, Mapping[str, Kinds]]] = {
    "base64": {"media_type": str, "data": str},
    "url": {"url": str},
    "file": {"file_id": str},
    "text": {"media_type": str, "data": str},
    "content": {"content": (str, list)},
}
