"""OpenAI Responses API payloads to neutral messages (``?format=responses``).

Accepted: a Response object (``{"object": "response", "output": [items], "usage", "model",
"status", "incomplete_details"}``), one input/output item, or a list of items (one atomic
batch). SDK objects are dumped with ``model_dump(mode="json", exclude_none=True)`` first.

Grouping: consecutive assistant-side items (``reasoning``, ``function_call``, assistant
``message``, any item type convlog does not model such as ``web_search_call``) are ONE neutral
assistant message, blocks in item order; each ``function_call_output`` is a neutral tool
message; each user / system / developer message is its own (``developer`` is a neutral
``system`` message; the native role stays in the item record below).

Lossless layout (so rendering back gives the same items, see events/formats/responses/render.py):

- a ``message`` or ``function_call_output`` item is a run of blocks, one per content part
  (``input_text``/``output_text`` -> TextBlock, ``input_image`` with an ``image_url`` and
  ``input_file`` with a ``file_url`` or a base64 data URL ``file_data`` -> MediaBlock, any other
  part -> OpaqueBlock of the part). Its FIRST block carries the item record under the reserved
  extra key :data:`ITEM_KEY`: ``{"item": <the item's keys, content/output as null>, "key":
  "content"|"output", "string": <content was a string>, "n": <blocks in the item>}``; text blocks
  also carry the item's ``id`` as ``item_id``. A part's keys beyond the modelled ones
  (``annotations``, ``logprobs``, a part type other than the role's default) are its ``extra``;
- an item whose first part cannot carry that record (no parts, or an unmodelled first part:
  a refusal-only message, an image by ``file_id``) is kept whole as one OpaqueBlock;
- ``function_call`` -> ToolCallBlock(id=call_id, item_id=fc_…, extra=status, namespace...);
- ``reasoning`` -> ReasoningBlock(item_id=rs_…, summary texts, encrypted_content, text = the one
  ``reasoning_text`` part); anything not in that canonical shape (several content parts, a null
  ``encrypted_content``, ``status``) is kept in ``extra`` and wins on render;
- an item of a type convlog does not model -> OpaqueBlock of the whole item, in the assistant
  message.

Refused (:class:`~events.errors.NativeFormatError`, ``code``): see :data:`CODES`; every known
key of an item, a part and a Response is type-checked (:mod:`events.formats.responses.schema`, after
``openai.types.responses``), an item type convlog does not model is kept whole, unchecked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from events.blocks import Block, MediaBlock, OpaqueBlock, ReasoningBlock, TextBlock, ToolCallBlock, native_message
from events.event_types import FinishReason, MessageAppended, Role, Usage
from events.formats import Parsed
from events.formats.responses.rules import USER_SIDE_ROLES, check_pairing, refuse
from events.formats.responses.schema import RESPONSES_ITEMS, RESPONSES_PARTS, RESPONSES_RESPONSE
from events.formats.schema import check_counts, check_fields
from events.servable import check_nesting
from events.strict_json import NotJsonError, compact_json, dump_json, parse_json

__all__ = ["ITEM_KEY", "parse"]

ITEM_KEY: Final = "convlog.item"
"""The reserved extra key of an item's first block: the item's own keys (see the docstring)."""

_DATA_URL: Final = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,([A-Za-z0-9+/]*={0,2})")
_DETAILS: Final = ("auto", "low", "high")


def parse(payload: object, *, new_id: Callable[[], str]) -> Parsed:
    """The neutral messages of one Responses payload, in order (one atomic batch)."""
    dump = getattr(payload, "model_dump", None)
    doc: Any = dump(mode="json", exclude_none=True) if callable(dump) else payload
    check_nesting(doc)
    try:  # once, so every verbatim piece below is strict JSON (no NaN, no non-JSON values)
        dump_json(doc)
    except NotJsonError as e:
        raise refuse(f"the payload is not JSON: {e}", "", "not_json") from e
    response: Mapping[str, Any] | None = None
    if isinstance(doc, Mapping) and (doc.get("object") == "response" or ("output" in doc and "type" not in doc)):
        response = doc
        check_fields(doc, RESPONSES_RESPONSE, "", "invalid_response")
        check_fields(
            doc.get("incomplete_details") or {}, {"reason": (str, None)}, "incomplete_details", "invalid_response"
        )
        items, prefix = doc.get("output"), "output"
        if not isinstance(items, list):
            raise refuse("a Response's output must be a list of items", "output", "invalid_response")
    elif isinstance(doc, Mapping):
        items, prefix = [doc], None
    elif isinstance(doc, list):
        items, prefix = doc, ""
    else:
        raise refuse("expected a Response object, an item or a list of items", "", "invalid_payload")
    if not items:
        raise refuse("no items to append", prefix or "", "empty_payload")
    paths = [("" if prefix is None else f"{prefix}[{i}]") for i in range(len(items))]
    check_pairing(items, paths)
    groups = _groups(items, paths)
    extras = _response_fields(response) if response is not None else {}
    messages: list[MessageAppended] = []
    for role, blocks, call_id in groups:
        fields = extras if role == "assistant" else {}
        if role == "assistant" and response is not None:
            fields = {**fields, "finish_reason": _finish_reason(response, blocks)}
        messages.append(
            native_message(
                message_id=new_id(),
                role=role,
                blocks=blocks,
                api="responses",
                provider="openai",
                tool_call_id=call_id,
                **fields,
            )
        )
    native_id = response.get("id") if response is not None else None
    outputs = {
        item["call_id"]: _at(path, "call_id")
        for item, path in zip(items, paths, strict=True)
        if item.get("type") == "function_call_output"
    }
    answer_paths = {m.message_id: outputs[m.tool_call_id] for m in messages if m.tool_call_id in outputs}
    return Parsed(tuple(messages), native_id if isinstance(native_id, str) else None, answer_paths)


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _groups(items: Sequence[Mapping[str, Any]], paths: Sequence[str]) -> list[tuple[Role, list[Block], str | None]]:
    """(role, blocks, tool_call_id) per neutral message: assistant-side items run together."""
    out: list[tuple[Role, list[Block], str | None]] = []
    assistant: list[Block] = []
    for item, path in zip(items, paths, strict=True):
        kind = item.get("type")
        role = item.get("role")
        if "type" in item and not isinstance(kind, str):  # null too: the item would be served without a type
            raise refuse("an item's type must be a string", _at(path, "type"), "invalid_item")
        check_fields(item, RESPONSES_ITEMS.get(kind or "message", {}), path, "invalid_item")  # unknown types: opaque
        if kind is None and role is None:
            raise refuse("an item needs a type (or a role, for a message)", _at(path, "type"), "missing_type")
        if kind in (None, "message"):
            if role == "assistant":
                assistant.extend(_message_blocks(item, path, default_part="output_text"))
                continue
            if not isinstance(role, str) or role not in USER_SIDE_ROLES:
                raise refuse(
                    f"unknown role {role!r} (user, system, developer, assistant)", _at(path, "role"), "unknown_role"
                )
            user_side: tuple[Role, list[Block], str | None] = (
                USER_SIDE_ROLES[role],
                _message_blocks(item, path, default_part="input_text"),
                None,
            )
        elif kind == "function_call_output":
            user_side = ("tool", _output_blocks(item, path), item["call_id"])
        else:
            assistant.append(_assistant_item(item, path))
            continue
        if assistant:
            out.append(("assistant", assistant, None))
            assistant = []
        out.append(user_side)
    if assistant:
        out.append(("assistant", assistant, None))
    return out


def _assistant_item(item: Mapping[str, Any], path: str) -> Block:
    kind = item["type"]
    if kind == "function_call":
        return _function_call(item, path)
    if kind == "reasoning":
        return _reasoning(item, path)
    return OpaqueBlock(provider="responses", json=compact_json(item))


def _function_call(item: Mapping[str, Any], path: str) -> ToolCallBlock:
    name, arguments, item_id = item.get("name"), item.get("arguments"), item.get("id")
    if not isinstance(name, str) or not name:
        raise refuse("a function_call needs a name", _at(path, "name"), "function_call_without_name")
    if not isinstance(arguments, str):
        raise refuse("arguments must be a string of JSON", _at(path, "arguments"), "arguments_not_string")
    if item.get("status") not in ("in_progress", "incomplete"):  # a call cut short may stop mid-arguments
        try:
            parse_json(arguments)
        except NotJsonError as e:
            raise refuse(f"arguments are not JSON ({e})", _at(path, "arguments"), "arguments_not_json") from e
    consumed = {"type", "call_id", "name", "arguments"} | ({"id"} if isinstance(item_id, str) else set())
    return ToolCallBlock(
        id=item["call_id"],
        name=name,
        arguments=arguments,
        item_id=item_id if isinstance(item_id, str) else None,
        extra=_extra({k: v for k, v in item.items() if k not in consumed}),
    )


def _reasoning(item: Mapping[str, Any], path: str) -> ReasoningBlock:
    item_id = item.get("id")
    if not isinstance(item_id, str) or not item_id:
        raise refuse("a reasoning item needs its id (rs_…)", _at(path, "id"), "reasoning_without_id")
    if "summary" not in item:
        raise refuse(
            "a reasoning item needs a summary (a list, even empty)", _at(path, "summary"), "reasoning_without_summary"
        )
    summary = item["summary"]
    if not isinstance(summary, list):
        raise refuse("a reasoning summary must be a list", _at(path, "summary"), "invalid_summary")
    for j, entry in enumerate(summary):
        at = f"{_at(path, 'summary')}[{j}]"
        if not isinstance(entry, Mapping):
            raise refuse("a summary entry is a summary_text object", at, "invalid_summary")
        check_fields(entry, {"type": str, "text": str}, at, "invalid_summary")
    for j, part in enumerate(item.get("content") or ()):
        at = f"{_at(path, 'content')}[{j}]"
        if not isinstance(part, Mapping):
            raise refuse("a reasoning content part is an object", at, "invalid_part")
        check_fields(part, {"type": str, "text": str}, at, "invalid_part")
    rest = {k: v for k, v in item.items() if k not in ("type", "id")}
    texts = tuple(p["text"] for p in summary if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    if len(texts) == len(summary) and all(
        p.keys() == {"type", "text"} and p["type"] == "summary_text" for p in summary
    ):
        del rest["summary"]  # canonical: the texts say it all
    encrypted = item.get("encrypted_content")
    if isinstance(encrypted, str):
        del rest["encrypted_content"]
    content, text = item.get("content"), None
    if (
        isinstance(content, list)
        and len(content) == 1
        and isinstance(content[0], Mapping)
        and content[0].keys() == {"type", "text"}
        and content[0]["type"] == "reasoning_text"
        and isinstance(content[0]["text"], str)
    ):
        text = content[0]["text"]
        del rest["content"]
    return ReasoningBlock(
        text=text,
        summary=texts,
        encrypted_content=encrypted if isinstance(encrypted, str) else None,
        item_id=item_id,
        extra=_extra(rest),
    )


def _message_blocks(item: Mapping[str, Any], path: str, *, default_part: str) -> list[Block]:
    content = item.get("content")
    if isinstance(content, str):
        first: Block = TextBlock(content, item_id=_str_or_none(item.get("id")))
        return [_with_record(first, item, key="content", string=True, n=1)]
    if not isinstance(content, list):
        raise refuse("content must be a string or a list of parts", _at(path, "content"), "invalid_content")
    parts = [
        _part(p, f"{_at(path, 'content')}[{j}]", default_part, _str_or_none(item.get("id")))
        for j, p in enumerate(content)
    ]
    return _item_run(item, parts, key="content")


def _output_blocks(item: Mapping[str, Any], path: str) -> list[Block]:
    output = item.get("output")
    if isinstance(output, str):
        return [_with_record(TextBlock(output), item, key="output", string=True, n=1)]
    if not isinstance(output, list):
        raise refuse("output must be a string or a list of parts", _at(path, "output"), "invalid_output")
    parts = [_part(p, f"{_at(path, 'output')}[{j}]", "input_text", None) for j, p in enumerate(output)]
    return _item_run(item, parts, key="output")


def _item_run(item: Mapping[str, Any], parts: list[Block], *, key: str) -> list[Block]:
    if not parts or isinstance(parts[0], OpaqueBlock):  # nothing to carry the record: keep it whole
        return [OpaqueBlock(provider="responses", json=compact_json(item))]
    return [_with_record(parts[0], item, key=key, string=False, n=len(parts)), *parts[1:]]


def _with_record(block: Block, item: Mapping[str, Any], *, key: str, string: bool, n: int) -> Block:
    assert isinstance(block, TextBlock | MediaBlock)  # _item_run keeps opaque firsts whole
    keys = {k: (None if k == key else v) for k, v in item.items()}
    record = {"item": keys, "key": key, "string": string, "n": n}
    extra = _parse_extra(block.extra)
    return replace(block, extra=compact_json({ITEM_KEY: record, **extra}))


def _part(part: Any, path: str, default_type: str, item_id: str | None) -> Block:
    if not isinstance(part, Mapping):
        raise refuse("a content part must be an object", path, "invalid_part")
    kind = part.get("type")
    if not isinstance(kind, str):
        raise refuse("a content part's type must be a string", _at(path, "type"), "invalid_part")
    check_fields(part, RESPONSES_PARTS.get(kind, {}), path, "invalid_part")
    if kind in ("input_text", "output_text"):
        text = part.get("text")
        if not isinstance(text, str):
            raise refuse("a text part's text must be a string", _at(path, "text"), "invalid_part")
        rest = {k: v for k, v in part.items() if k != "text" and (k != "type" or v != default_type)}
        return TextBlock(text, item_id=item_id, extra=_extra(rest))
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        detail = part.get("detail")
        consumed = {"type", "image_url"} | ({"detail"} if detail in _DETAILS else set())
        rest = {k: v for k, v in part.items() if k not in consumed}
        url, data, media_type = _split_data_url(part["image_url"])
        return MediaBlock(
            "image",
            url=url,
            data=data,
            media_type=media_type,
            detail=detail if detail in _DETAILS else None,
            extra=_extra(rest),
        )
    if kind == "input_file" and "file_id" not in part:
        return _file(part) or OpaqueBlock(provider="responses", json=compact_json(part))
    return OpaqueBlock(provider="responses", json=compact_json(part))


def _file(part: Mapping[str, Any]) -> MediaBlock | None:
    filename = part.get("filename")
    consumed = {"type"} | ({"filename"} if isinstance(filename, str) else set())
    name = filename if isinstance(filename, str) else None
    if isinstance(part.get("file_url"), str) and "file_data" not in part:
        rest = {k: v for k, v in part.items() if k not in consumed | {"file_url"}}
        return MediaBlock("file", url=part["file_url"], filename=name, extra=_extra(rest))
    file_data = part.get("file_data")
    if isinstance(file_data, str) and "file_url" not in part:
        url, data, media_type = _split_data_url(file_data)
        if url is None:
            rest = {k: v for k, v in part.items() if k not in consumed | {"file_data"}}
            return MediaBlock("file", data=data, media_type=media_type, filename=name, extra=_extra(rest))
    return None


def _split_data_url(url: str) -> tuple[str | None, str | None, str | None]:
    """(url, data, media_type): a base64 data URL is kept as its data and media type (what
    other formats' inline sources need); it renders back to the same text."""
    m = _DATA_URL.fullmatch(url)
    if m is None:
        return url, None, None
    return None, m.group(2), m.group(1)


def _response_fields(response: Mapping[str, Any]) -> dict[str, Any]:
    """model, usage and the response's id (``metadata["openai.response_id"]``, for audits)."""
    model, response_id = response.get("model"), response.get("id")
    return {
        "model": model if isinstance(model, str) else None,
        "usage": _usage(response.get("usage")),
        "metadata": {"openai.response_id": response_id} if isinstance(response_id, str) else None,
    }


def _usage(usage: Any) -> Usage | None:
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        raise refuse("usage must be an object", "usage", "invalid_usage")
    check_counts(usage, ("input_tokens", "output_tokens", "total_tokens"), "usage", "invalid_usage")
    check_fields(
        usage, {"input_tokens_details": (dict, None), "output_tokens_details": (dict, None)}, "usage", "invalid_usage"
    )
    inputs, outputs = usage.get("input_tokens_details") or {}, usage.get("output_tokens_details") or {}
    check_counts(inputs, ("cached_tokens", "cache_write_tokens"), "usage.input_tokens_details", "invalid_usage")
    check_counts(outputs, ("reasoning_tokens",), "usage.output_tokens_details", "invalid_usage")
    return Usage(
        prompt_tokens=usage.get("input_tokens"),
        completion_tokens=usage.get("output_tokens"),
        cached_tokens=inputs.get("cached_tokens"),
        cache_write_tokens=inputs.get("cache_write_tokens"),  # part of input_tokens
        reasoning_tokens=outputs.get("reasoning_tokens"),
    )


def _finish_reason(response: Mapping[str, Any], blocks: Sequence[Block]) -> FinishReason:
    status = response.get("status")
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, Mapping) else None
        return "content_filter" if reason == "content_filter" else "length"
    if status in ("failed", "cancelled", "in_progress", "queued"):
        return "interrupted"
    if any(isinstance(b, ToolCallBlock) for b in blocks):
        return "tool_calls"
    if any(isinstance(b, OpaqueBlock) and _is_refusal(json.loads(b.json)) for b in blocks):
        return "content_filter"
    return "stop"


def _is_refusal(doc: Any) -> bool:
    """A refusal part, or a message item (kept whole) holding one."""
    if not isinstance(doc, Mapping):
        return False
    content = doc.get("content")
    return doc.get("type") == "refusal" or (isinstance(content, list) and any(_is_refusal(p) for p in content))


def _extra(rest: Mapping[str, Any]) -> str | None:
    return compact_json(dict(rest)) if rest else None


def _parse_extra(extra: str | None) -> dict[str, Any]:
    return dict(json.loads(extra)) if extra else {}


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
