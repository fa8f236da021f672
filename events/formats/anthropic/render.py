"""Anthropic Messages, serve side: ``{"system": [text blocks], "messages": [...]}``.

Rules enforced by construction (checked by :func:`events.formats.anthropic.rules.violations`):

- ``system`` is top level: the stored system prompts' text, then the summary, as text blocks
  (the key is left out when there is none). ``messages`` holds only user/assistant, alternating:
  consecutive neutral messages of one Anthropic role are merged into one message whose content
  is always a list of blocks. A tool message is a ``tool_result`` block of a user message; the
  results of one assistant message's calls go into that one user message, first, before any text.
- A neutral message appended as ``anthropic`` renders back exactly: its blocks with their
  ``extra`` keys (citations...), its opaque blocks verbatim, a string content as a string.
  Stored ``cache_control`` keys are never served: breakpoints are this renderer's decision.
- Thinking (``thinking`` + ``signature``, ``redacted_thinking``) is served complete, unmodified
  and in order only to the model that made it (:func:`reasoning_served`), else it is dropped and
  reported. It never comes after a ``tool_use``, and an assistant message holding a tool_use and
  thinking starts with thinking: should merging two assistant messages break that, the merged
  message's thinking is dropped (reported, ``unsupported``).
- ``Target.cache``: ``cache_control: {"type": "ephemeral"}`` on the last stored system prompt's
  block (end of system), on the summary block (end of summary), and on the last cacheable block
  (not thinking, not empty) of the last *stable* message: the one before the last user message,
  i.e. the prefix the next request re-sends unchanged. At most 3 of the 4 allowed, and never
  more than 4 counting any a verbatim opaque block carries.

Serving other formats' messages to Anthropic (what is kept, converted, dropped):

- kept: text; tool calls (``tool_use``, ``input`` = the parsed JSON arguments, and a call whose
  arguments are not a JSON object is wrapped as ``{"value": <the parsed JSON>}``); tool results
  (``tool_result`` with ``is_error``); images by https URL or base64 (a ``data:`` URL becomes a
  base64 source) of a type Anthropic takes (jpeg, png, gif, webp); PDF files (url or base64) as
  ``document`` blocks.
- converted: tool call ids outside ``^[A-Za-z0-9_-]+$`` become a deterministic safe id (both in
  ``tool_use`` and its ``tool_result``); several consecutive same-role messages become one;
  a tool result with one text is a string content.
- dropped: reasoning of every other format (Responses reasoning items, Gemini thoughts, Chat
  Completions ``reasoning_content``) and Anthropic thinking of another model, reported as
  ``Dropped(.., "reasoning", other_provider|other_model)``, never turned into text; other
  formats' opaque blocks (``Dropped(.., "opaque", "unsupported")``), ``extra`` keys and Gemini
  the ``thoughtSignature`` of function calls (silently);
  image ``detail``; images and files Anthropic cannot take become a ``[file omitted]`` text
  (``Dropped(.., "media", "unsupported")``); empty text blocks (Anthropic refuses them). A user
  message left with nothing is a ``[content omitted]`` text (the turn keeps its user message);
  an assistant message left with nothing is left out.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from events.blocks import IMAGE_PLACEHOLDER, MEDIA_PLACEHOLDER
from events.event_types import Block, MediaBlock, OpaqueBlock, ReasoningBlock, TextBlock, ToolCallBlock
from events.formats.anthropic.parse import FORM_KEY
from events.formats.anthropic.rules import CACHEABLE, ID_CHARS, THINKING, TOOL_USE_ID, thinking_ok
from events.formats.anthropic.traits import TRAITS
from events.formats.rendering import (
    Dropped,
    DropReason,
    Rendered,
    RenderRequest,
    Selected,
    Target,
    extras_served,
    reasoning_served,
    stored_blocks,
)
from events.formats.stored import StoredMessage
from events.strict_json import parse_json

__all__ = ["render", "wire_id"]

EPHEMERAL = {"type": "ephemeral"}
CONTENT_PLACEHOLDER = "[content omitted]"  # a user message none of whose blocks Anthropic can take
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_NOT_SERVED = ("cache_control", FORM_KEY)  # extra keys never rendered


def wire_id(call_id: str) -> str:
    """``call_id`` if Anthropic takes it as a tool_use id, else a safe one derived from it."""
    if TOOL_USE_ID.match(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:12]
    return f"{re.sub(rf'[^{ID_CHARS}]', '_', call_id)[:40]}_{digest}"


@dataclass
class _Message:
    role: str
    content: list[dict[str, Any]] | str
    origins: list[str] = field(default_factory=list)  # the neutral message id of each block

    def blocks(self) -> list[dict[str, Any]]:
        if isinstance(self.content, str):
            self.content = [{"type": "text", "text": self.content}]
        return self.content


def render(request: RenderRequest) -> Rendered:
    r = _Rendering(request.target)
    system = [{"type": "text", "text": t} for m in request.system for t in _texts(m)]
    system_end = len(system) - 1
    if request.summary:
        system.append({"type": "text", "text": request.summary})
    for sel in request.messages:
        r.add(sel)
    r.settle_thinking()
    if request.target.cache:  # before the fragment is built: a string content may become a block list
        _place_breakpoints(system, system_end, summary=bool(request.summary), messages=r.messages)
    messages = [{"role": m.role, "content": m.content} for m in r.messages]
    fragment: dict[str, Any] = {"system": system, "messages": messages} if system else {"messages": messages}
    return Rendered(fragment, tuple(r.dropped))


def _texts(message: StoredMessage) -> list[str]:
    return [b.text for b in stored_blocks(message) if isinstance(b, TextBlock) and b.text]


class _Rendering:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.messages: list[_Message] = []
        self.dropped: list[Dropped] = []

    def drop(self, message_id: str, what: str, reason: DropReason) -> None:
        item = Dropped(message_id, what, reason)
        if item not in self.dropped:
            self.dropped.append(item)

    def add(self, sel: Selected) -> None:
        m = sel.message
        own = extras_served(m, self.target)
        blocks = stored_blocks(m)
        if m.role == "tool":
            self._append("user", [self._tool_result(sel, blocks, own=own)], m.message_id, result=True)
            return
        role = "assistant" if m.role == "assistant" else "user"
        form, text = _form(blocks) if own else (None, "")
        if form == "string" and text:
            self._append(role, text, m.message_id)
            return
        why_not = reasoning_served(m, self.target, model_bound=TRAITS.model_bound_reasoning)
        calls = set(sel.call_ids)
        out: list[dict[str, Any]] = []
        for b in blocks:
            if isinstance(b, ReasoningBlock):
                if why_not is None and (b.redacted_data is not None or b.signature):
                    out.append(_reasoning(b))
                else:  # another's, or one Anthropic cannot take back (no signature: a foreign record's)
                    self.drop(m.message_id, "reasoning", why_not or "unsupported")
            elif isinstance(b, ToolCallBlock):
                if b.id in calls:
                    out.append(_tool_use(b, own=own))
            else:
                out.extend(self._content(b, m, sel, own=own, role=role))
        if not out and role == "user":  # all of it was another format's: keep the turn's user message
            out = [{"type": "text", "text": CONTENT_PLACEHOLDER}]
        if out:  # an assistant message with nothing servable is left out (its neighbours merge)
            self._append(role, out, m.message_id)

    def _content(
        self, b: Block, m: StoredMessage, sel: Selected, *, own: bool, role: str = "user"
    ) -> list[dict[str, Any]]:
        if isinstance(b, TextBlock):
            return [_with_extra({"type": "text", "text": b.text}, b.extra, own=own)] if b.text else []
        if isinstance(b, MediaBlock):
            if b.kind == "image" and not sel.keep_images:
                return [{"type": "text", "text": IMAGE_PLACEHOLDER}]
            media = _media(b, own=own) if role == "user" else None
            if media is None:
                self.drop(m.message_id, "media", "unsupported")
                return [{"type": "text", "text": MEDIA_PLACEHOLDER}]
            return [media]
        if isinstance(b, OpaqueBlock):
            if own and b.provider == "anthropic":
                return [json.loads(b.json)]
            self.drop(m.message_id, "opaque", "unsupported")
            return []
        return []  # reasoning and tool calls are placed by the caller

    def _tool_result(self, sel: Selected, blocks: Sequence[Block], *, own: bool) -> dict[str, Any]:
        m = sel.message
        out: dict[str, Any] = {"type": "tool_result", "tool_use_id": wire_id(m.tool_call_id or "")}
        form, text = _form(blocks) if own else (None, "")
        if form == "string":
            out["content"] = text
        elif form == "empty":
            out["content"] = []
        elif form is None:
            parts = [p for b in blocks for p in self._content(b, m, sel, own=own)]
            if not own and len(parts) == 1 and parts[0]["type"] == "text":
                out["content"] = parts[0]["text"]
            elif parts:
                out["content"] = parts
        if m.is_error is not None:
            out["is_error"] = m.is_error
        return out

    def _append(self, role: str, content: list[dict[str, Any]] | str, origin: str, *, result: bool = False) -> None:
        last = self.messages[-1] if self.messages else None
        if last is None or last.role != role:
            n = 1 if isinstance(content, str) else len(content)
            self.messages.append(_Message(role, content, [origin] * n))
            return
        blocks = last.blocks()
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if result:  # results go before any other block of the user message
            at = next((i for i, b in enumerate(blocks) if b.get("type") != "tool_result"), len(blocks))
            blocks[at:at] = content
            last.origins[at:at] = [origin] * len(content)
        else:
            blocks.extend(content)
            last.origins.extend([origin] * len(content))

    def settle_thinking(self) -> None:
        """A merged assistant message whose thinking would sit after a tool_use, or not first
        beside one, loses its thinking (Anthropic refuses both)."""
        for msg in self.messages:
            if msg.role != "assistant" or isinstance(msg.content, str) or thinking_ok(msg.content):
                continue
            kept = [(b, o) for b, o in zip(msg.content, msg.origins, strict=True) if b.get("type") not in THINKING]
            for b, o in zip(msg.content, msg.origins, strict=True):
                if b.get("type") in THINKING:
                    self.drop(o, "reasoning", "unsupported")
            msg.content, msg.origins = [b for b, _ in kept], [o for _, o in kept]


def _form(blocks: Sequence[Block]) -> tuple[str | None, str]:
    """How a content that was not a list came (string, absent, empty), and its text."""
    if len(blocks) == 1 and isinstance(blocks[0], TextBlock) and blocks[0].extra:
        form = json.loads(blocks[0].extra).get(FORM_KEY)
        return (form if isinstance(form, str) else None), blocks[0].text
    return None, ""


def _with_extra(doc: dict[str, Any], extra: str | None, *, own: bool) -> dict[str, Any]:
    if own and extra:
        doc.update((k, v) for k, v in json.loads(extra).items() if k not in _NOT_SERVED and k not in doc)
    return doc


def _reasoning(b: ReasoningBlock) -> dict[str, Any]:
    if b.redacted_data is not None:
        return _with_extra({"type": "redacted_thinking", "data": b.redacted_data}, b.extra, own=True)
    doc = {"type": "thinking", "thinking": b.text or "", "signature": b.signature or ""}
    return _with_extra(doc, b.extra, own=True)


def _tool_use(b: ToolCallBlock, *, own: bool) -> dict[str, Any]:
    parsed = parse_json(b.arguments, stored=True)
    arguments = parsed if isinstance(parsed, dict) else {"value": parsed}
    return _with_extra({"type": "tool_use", "id": wire_id(b.id), "name": b.name, "input": arguments}, b.extra, own=own)


def _media(b: MediaBlock, *, own: bool) -> dict[str, Any] | None:
    """An image or document block, or None where Anthropic has no source for it."""
    source: dict[str, Any] | None = None
    media_type, data = b.media_type, b.data
    if b.url is not None and b.url.startswith("data:"):
        head, sep, payload = b.url[5:].partition(",")
        if not (sep and head.endswith(";base64")):
            return None
        media_type, data = head.removesuffix(";base64"), payload
    elif b.url is not None:
        source = {"type": "url", "url": b.url}
    if source is None and data is not None and media_type is not None:
        source = {"type": "base64", "media_type": media_type, "data": data}
    if source is None:
        return None
    if not own and source["type"] == "base64":
        allowed = _IMAGE_TYPES if b.kind == "image" else {"application/pdf"}
        if media_type not in allowed:
            return None
    if not own and b.kind == "file" and not _pdf_url(source.get("url")):
        return None
    doc = {"type": "image" if b.kind == "image" else "document", "source": source}
    return _with_extra(doc, b.extra, own=own)


def _pdf_url(url: str | None) -> bool:
    return url is None or url.lower().split("?", 1)[0].endswith(".pdf")


def _place_breakpoints(
    system: list[dict[str, Any]], system_end: int, *, summary: bool, messages: list[_Message]
) -> None:
    budget = 4 - sum(_count_cache_control(m.content) for m in messages)
    targets: list[dict[str, Any]] = []
    if system_end >= 0:
        targets.append(system[system_end])
    if summary:
        targets.append(system[-1])
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    if last_user > 0:
        stable = messages[last_user - 1]
        block = next((b for b in reversed(stable.blocks()) if b.get("type") in CACHEABLE and b.get("text", "x")), None)
        if block is not None:
            targets.append(block)
    for block in targets[: max(budget, 0)]:
        block["cache_control"] = dict(EPHEMERAL)


def _count_cache_control(value: object) -> int:
    if isinstance(value, dict):
        return ("cache_control" in value) + sum(_count_cache_control(v) for v in value.values())
    if isinstance(value, list):
        return sum(_count_cache_control(v) for v in value)
    return 0
