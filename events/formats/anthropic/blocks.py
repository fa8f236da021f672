"""Anthropic content blocks to neutral blocks (the parser's, events/formats/anthropic/parse.py):
each block type-checked after ``anthropic.types``, the keys convlog does not model kept in the
block's ``extra``, a block of a type it does not model kept whole as an opaque block."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from events.errors import NativeFormatError
from events.event_types import (
    Block,
    MediaBlock,
    OpaqueBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
)
from events.formats.anthropic.rules import THINKING
from events.formats.anthropic.schema import ANTHROPIC_BLOCKS, ANTHROPIC_SOURCES
from events.formats.schema import check_fields
from events.strict_json import NotJsonError, dump_json

__all__ = ["PROVIDER", "block_object", "content_block", "fail", "json_text", "result_block"]

PROVIDER = "anthropic"
_MEDIA_TYPES = {"image": "image", "document": "file"}
_MEDIA_SOURCES = {"base64": ("type", "media_type", "data"), "url": ("type", "url")}
_NOT_IN_TOOL_RESULT = frozenset({"tool_use", "tool_result", *THINKING})


def fail(message: str, field: str, code: str) -> NativeFormatError:
    return NativeFormatError(message, field=field, code=code)


def block_object(raw: object, field: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("type"), str):
        raise fail("must be a content block object with a type", field, "invalid_content")
    block = cast("Mapping[str, Any]", raw)
    check_fields(block, ANTHROPIC_BLOCKS.get(block["type"], {}), field, "invalid_block")
    if "signature" in block and block["type"] != "thinking":  # an unmodelled type too: served back, refused
        raise fail(
            f"a {block['type']} block carries no signature (thinking blocks do)",
            f"{field}.signature",
            "signature_on_non_thinking_block",
        )
    return block


def json_text(value: object, field: str) -> str:
    """Compact JSON of a payload value, refusing what is not JSON (NaN, Infinity) as the log must."""
    try:
        return dump_json(value)
    except NotJsonError as e:
        raise fail(str(e), field, "not_json") from e


def _extra(block: Mapping[str, Any], known: Sequence[str], field: str) -> str | None:
    rest = {k: v for k, v in block.items() if k not in known}
    return json_text(rest, field) if rest else None


def _text(block: Mapping[str, Any], key: str, field: str) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise fail("must be a string", f"{field}.{key}", "invalid_block")
    return value


def content_block(block: Mapping[str, Any], field: str) -> Block:
    kind = block["type"]
    if kind == "text":
        return TextBlock(_text(block, "text", field), extra=_extra(block, ("type", "text"), field))
    if kind in _MEDIA_TYPES:
        return _media(block, field)
    if kind == "tool_use":
        call_id, name = _text(block, "id", field), _text(block, "name", field)
        if not isinstance(block.get("input"), Mapping):
            raise fail("a tool_use input is a JSON object", f"{field}.input", "tool_use_input_not_object")
        return ToolCallBlock(
            call_id,
            name,
            json_text(block["input"], f"{field}.input"),
            extra=_extra(block, ("type", "id", "name", "input"), field),
        )
    if kind == "thinking":
        signature = block.get("signature")
        if not isinstance(signature, str) or not signature:
            raise fail(
                "a thinking block carries the signature it was returned with",
                f"{field}.signature",
                "thinking_without_signature",
            )
        return ReasoningBlock(
            text=_text(block, "thinking", field),
            signature=signature,
            extra=_extra(block, ("type", "thinking", "signature"), field),
        )
    if kind == "redacted_thinking":
        return ReasoningBlock(redacted_data=_text(block, "data", field), extra=_extra(block, ("type", "data"), field))
    return OpaqueBlock(PROVIDER, json_text(block, field))


def _media(block: Mapping[str, Any], field: str) -> Block:
    """An image or document with a base64 or url source; any other source is kept opaque."""
    source = block.get("source")
    if not isinstance(source, Mapping):
        raise fail(f"an {block['type']} block's source is an object", f"{field}.source", "invalid_block")
    if not isinstance(source.get("type"), str):
        raise fail("a source's type is a string", f"{field}.source.type", "invalid_block")
    for key, kinds in ANTHROPIC_SOURCES.get(source["type"], {}).items():
        if key not in source:
            raise fail(f"a {source['type']} source needs its {key}", f"{field}.source.{key}", "invalid_block")
        check_fields(source, {key: kinds}, f"{field}.source", "invalid_block")
    keys = _MEDIA_SOURCES.get(source["type"])
    if keys is not None and set(source) == set(keys):  # the types checked above: a modelled source
        kind: Literal["image", "file"] = "image" if block["type"] == "image" else "file"
        extra = _extra(block, ("type", "source"), field)
        return MediaBlock(
            kind, url=source.get("url"), data=source.get("data"), media_type=source.get("media_type"), extra=extra
        )
    return OpaqueBlock(PROVIDER, json_text(block, field))


def result_block(raw: object, field: str) -> Block:
    block = block_object(raw, field)
    if block["type"] in _NOT_IN_TOOL_RESULT:
        raise fail(
            f"a tool_result's content holds no {block['type']} block", f"{field}.type", "invalid_tool_result_content"
        )
    return content_block(block, field)
