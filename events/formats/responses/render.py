"""Serving a context in the OpenAI Responses format: ``{"instructions": ..., "input": [items]}``.

``instructions``: the stored system prompts' texts, then the summary, joined with a blank line
(omitted when there are none). ``input``: the items, in message order: each function_call
before its function_call_output (parallel calls: every call item, then their outputs, as the
neutral order has them), and a reasoning item only directly before the item it belongs to.

Messages appended as ``responses`` come back as the items they were (the item record on each
item's first block, see events/formats/responses/parse.py): ids (msg_/fc_/rs_), ``status``,
``phase``, annotations, ``encrypted_content`` and ``summary: []`` byte for byte, unmodelled
items and parts verbatim.

Messages from other formats (what is kept / converted / dropped):

- kept: user text, images (``input_image`` with the URL or the base64 data URL; only the
  turns ``keep_images`` allows, else an ``input_text`` "[image omitted]") and files
  (``input_file`` with ``file_url`` or ``file_data``); assistant text; tool calls (id -> call_id,
  name, JSON arguments) and tool results (text, images, files);
- converted: a user message is ``{"type": "message", "role": "user", "content": <string for one
  text, else input parts>}``; assistant text is an easy input message ``{"type": "message",
  "role": "assistant", "content": "<text>"}`` per run of consecutive text blocks (joined with no
  separator: Anthropic splits one answer at its citations). That string form is what
  ``openai.types.responses.ResponseInputParam`` accepts for an assistant message without an id
  (``ResponseOutputMessageParam`` needs ``id`` and ``status``; ``EasyInputMessageParam`` takes
  input parts only). A tool call is a ``function_call`` with ``call_id`` and no ``id`` (fc_… ids
  come only from Responses); a tool result is a ``function_call_output`` (``output`` a string
  for one text, else input parts);
- dropped (and listed in ``Rendered.dropped``): reasoning of any other format
  (``other_provider``; never as text), opaque blocks of other formats (``unsupported``), images
  or files in an assistant message (``unsupported``: Responses takes none there), and a native
  reasoning item whose following item is not served (an unanswered call: ``unsupported``, a
  reasoning item cannot stand alone). Silently: other formats' block extras (citations,
  signatures of text parts), a tool result's ``is_error`` (Responses has no such field; the
  output text says it) and Chat Completions ``reasoning_content``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from events.blocks import IMAGE_PLACEHOLDER, Block, MediaBlock, OpaqueBlock, ReasoningBlock, TextBlock, ToolCallBlock
from events.formats.rendering import (
    Dropped,
    Rendered,
    RenderRequest,
    Selected,
    extras_served,
    reasoning_served,
    stored_blocks,
)
from events.formats.responses.parse import ITEM_KEY
from events.formats.responses.traits import TRAITS
from events.formats.stored import StoredMessage

__all__ = ["render"]


def render(request: RenderRequest) -> Rendered:
    dropped: dict[Dropped, None] = {}  # in order, once per message and kind: it says what, not how often
    texts: list[str] = []
    for system in request.system:
        for block in stored_blocks(system):
            if isinstance(block, TextBlock):
                texts.append(block.text)
            else:
                _drop(dropped, Dropped(system.message_id, _what(block), "unsupported"))
    if request.summary:
        texts.append(request.summary)
    items: list[dict[str, Any]] = []
    for selected in request.messages:
        native = extras_served(selected.message, request.target)
        if selected.message.role == "assistant":
            items.extend(_assistant(selected, request, native=native, dropped=dropped))
        else:
            items.extend(_user_side(selected, native=native, dropped=dropped))
    fragment: dict[str, Any] = {"instructions": "\n\n".join(texts)} if texts else {}
    fragment["input"] = _unique_call_ids(items)
    return Rendered(fragment, tuple(dropped))


def _unique_call_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses takes a ``call_id`` once per input, but neutral call ids may repeat in a
    conversation (Gemini's ``<name>:<k>`` in every content, the same payload appended twice): a
    repeated one is served as ``<id>#<n>``, and the outputs after it answer that one."""
    used: set[str] = set()
    current: dict[str, str] = {}
    for item in items:
        call_id = item.get("call_id")
        if not isinstance(call_id, str):
            continue
        if item.get("type") == "function_call":
            served, n = call_id, 1
            while served in used:
                n += 1
                served = f"{call_id}#{n}"
            used.add(served)
            current[call_id] = item["call_id"] = served
        elif item.get("type") == "function_call_output":
            item["call_id"] = current.get(call_id, call_id)
    return items


def _drop(dropped: dict[Dropped, None], entry: Dropped) -> None:
    dropped.setdefault(entry)


def _what(block: Block) -> str:
    if isinstance(block, ReasoningBlock):
        return "reasoning"
    if isinstance(block, OpaqueBlock):
        return "opaque"
    return "media" if isinstance(block, MediaBlock) else "text"


# A message's blocks in item terms: ("item", record, blocks of that native item),
# ("whole", opaque block kept as a whole native item) or ("block", a block on its own).
_Segment = tuple[str, Mapping[str, Any] | None, Sequence[Block]]


def _segments(blocks: Sequence[Block], *, native: bool) -> list[_Segment]:
    out: list[_Segment] = []
    i = 0
    while i < len(blocks):
        block = blocks[i]
        record = _record(block) if native else None
        if record is not None:
            n = int(record["n"])
            out.append(("item", record, blocks[i : i + n]))
            i += n
            continue
        out.append(("whole" if native and isinstance(block, OpaqueBlock) else "block", None, (block,)))
        i += 1
    return out


def _record(block: Block) -> Mapping[str, Any] | None:
    if isinstance(block, TextBlock | MediaBlock) and block.extra and ITEM_KEY in block.extra:
        record: Mapping[str, Any] | None = json.loads(block.extra).get(ITEM_KEY)
        return record
    return None


def _native_item(record: Mapping[str, Any], blocks: Sequence[Block], *, keep_images: bool) -> dict[str, Any]:
    item = dict(record["item"])
    key = record["key"]
    default = "output_text" if item.get("role") == "assistant" else "input_text"
    if record["string"]:
        first = blocks[0]
        item[key] = first.text if isinstance(first, TextBlock) else ""
    else:
        item[key] = [_part(b, default, native=True, keep_images=keep_images) for b in blocks]
    return item


def _part(block: Block, default_text: str, *, native: bool, keep_images: bool) -> dict[str, Any]:
    if isinstance(block, OpaqueBlock):
        parsed: dict[str, Any] = json.loads(block.json)
        return parsed
    extra = {k: v for k, v in json.loads(block.extra).items() if k != ITEM_KEY} if native and block.extra else {}
    if isinstance(block, TextBlock):
        return {"type": default_text, "text": block.text, **extra}
    if isinstance(block, MediaBlock):
        if block.kind == "image" and not keep_images:
            return {"type": "input_text", "text": IMAGE_PLACEHOLDER}
        media_type = block.media_type or "application/octet-stream"  # as the Chat Completions view says
        source = block.url if block.url is not None else f"data:{media_type};base64,{block.data}"
        if block.kind == "image":
            part: dict[str, Any] = {"type": "input_image", "image_url": source, "detail": block.detail or "auto"}
            if native and block.detail is None:
                del part["detail"]  # it was not a modelled value: the extra has the native one, or none
        else:
            part = {"type": "input_file", "file_url" if block.url is not None else "file_data": source}
            if block.filename is not None:
                part["filename"] = block.filename
        return {**part, **extra}
    raise AssertionError(f"not a content block: {block!r}")


def _user_side(selected: Selected, *, native: bool, dropped: dict[Dropped, None]) -> list[dict[str, Any]]:
    message = selected.message
    items: list[dict[str, Any]] = []
    loose: list[Block] = []
    at: int | None = None  # where the message's loose blocks go, as one item
    for kind, record, blocks in _segments(stored_blocks(message), native=native):
        if kind == "item" and record is not None:
            items.append(_native_item(record, blocks, keep_images=selected.keep_images))
        elif kind == "whole":
            items.append(json.loads(blocks[0].json) if isinstance(blocks[0], OpaqueBlock) else {})
        elif isinstance(blocks[0], TextBlock | MediaBlock):
            at = len(items) if at is None else at
            loose.append(blocks[0])
        else:
            _drop(dropped, Dropped(message.message_id, _what(blocks[0]), "unsupported"))
    if loose or not items:
        items.insert(
            at if at is not None else len(items), _foreign_user_side(message, loose, keep_images=selected.keep_images)
        )
    return items


def _foreign_user_side(message: StoredMessage, blocks: Sequence[Block], *, keep_images: bool) -> dict[str, Any]:
    if len(blocks) == 1 and isinstance(blocks[0], TextBlock):
        content: Any = blocks[0].text
    elif not blocks:
        content = ""
    else:
        content = [_part(b, "input_text", native=False, keep_images=keep_images) for b in blocks]
    if message.role == "tool":
        return {"type": "function_call_output", "call_id": message.tool_call_id, "output": content}
    return {"type": "message", "role": "system" if message.role == "system" else "user", "content": content}


def _assistant(
    selected: Selected, request: RenderRequest, *, native: bool, dropped: dict[Dropped, None]
) -> list[dict[str, Any]]:
    entries = _assistant_entries(selected, request, native=native, dropped=dropped)
    items: list[dict[str, Any]] = []
    for i, entry in enumerate(entries):
        if isinstance(entry, ReasoningBlock):
            # A reasoning item must be followed by the item it belongs to: not the end, not a
            # block left out (an unanswered call).
            following = next((e for e in entries[i + 1 :] if not isinstance(e, ReasoningBlock)), None)
            if following is None:
                _drop(dropped, Dropped(selected.message.message_id, "reasoning", "unsupported"))
            else:
                items.append(_reasoning(entry))
        elif entry is not None:
            items.append(entry)
    return items


def _assistant_entries(
    selected: Selected, request: RenderRequest, *, native: bool, dropped: dict[Dropped, None]
) -> list[dict[str, Any] | ReasoningBlock | None]:
    """The message's items in order, its served reasoning blocks as they are, and ``None`` for
    a block not served (an unanswered call, another format's opaque block)."""
    message = selected.message
    why_not = reasoning_served(message, request.target, model_bound=TRAITS.model_bound_reasoning)
    entries: list[dict[str, Any] | ReasoningBlock | None] = []
    text_run: list[str] = []
    for kind, record, blocks in _segments(stored_blocks(message), native=native):
        block = blocks[0]
        if kind == "block" and isinstance(block, TextBlock):
            text_run.append(block.text)
            continue
        _flush_text(text_run, entries)
        if kind == "item" and record is not None:
            entries.append(_native_item(record, blocks, keep_images=selected.keep_images))
        elif kind == "whole" and isinstance(block, OpaqueBlock):
            item = json.loads(block.json)
            if why_not is not None and "encrypted_content" in item:  # a compaction item: OpenAI's blob too
                _drop(dropped, Dropped(message.message_id, "opaque", why_not))
                item = None
            entries.append(item)
        elif isinstance(block, ToolCallBlock):
            entries.append(_function_call(block, native=native) if block.id in selected.call_ids else None)
        elif isinstance(block, ReasoningBlock) and why_not is None:
            entries.append(block)
        elif isinstance(block, ReasoningBlock) and why_not is not None:
            _drop(dropped, Dropped(message.message_id, "reasoning", why_not))
        else:  # another format's opaque block, media in an assistant message
            _drop(dropped, Dropped(message.message_id, _what(block), "unsupported"))
            entries.append(None)
    _flush_text(text_run, entries)
    return entries


def _flush_text(run: list[str], entries: list[dict[str, Any] | ReasoningBlock | None]) -> None:
    """A run of another format's text blocks is one easy input message (Anthropic splits one
    answer into blocks at its citations: joined with no separator)."""
    if any(run):
        entries.append({"type": "message", "role": "assistant", "content": "".join(run)})
    run.clear()


def _function_call(block: ToolCallBlock, *, native: bool) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "function_call"}
    if native and block.item_id is not None:
        item["id"] = block.item_id
    item.update(call_id=block.id, name=block.name, arguments=block.arguments)
    if native and block.extra:
        item.update(json.loads(block.extra))
    return item


def _reasoning(block: ReasoningBlock) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "id": block.item_id}
    item["summary"] = [{"type": "summary_text", "text": t} for t in block.summary or ()]
    if block.text is not None:
        item["content"] = [{"type": "reasoning_text", "text": block.text}]
    if block.encrypted_content is not None:
        item["encrypted_content"] = block.encrypted_content
    if block.extra:
        item.update(json.loads(block.extra))
    return item
