"""The ``gemini`` format: a selection rendered as a ``generateContent`` request fragment.

``{"system_instruction": {"parts": [{"text": ...}]}, "contents": [...]}``: the stored system
prompts, then the summary, one text part each (``system_instruction`` is left out when there is
no system text); ``contents`` with roles ``user`` and ``model``. Consecutive neutral messages of
one role are one Content: tool messages become ``functionResponse`` parts of one user content
(every response of a parallel call in that content, with the next user message's parts after
them, as Gemini's history has them).

What a message of each origin becomes (the switch table of docs/formats.md is built from this):

- **Gemini, the same model** (``reasoning_served`` is None): its parts exactly as appended —
  thought parts with their ``thoughtSignature``, signatures on text and call parts, ``id``s,
  the parts' unmodelled keys, opaque parts verbatim — in the key spelling they came in
  (camelCase or snake_case; camelCase for everything else). Two exceptions: consecutive
  contents of one role are merged, and a model content whose first ``functionCall`` has no
  signature gets the skip value (below).
- **Gemini, another model**: thought parts are dropped (``Dropped(.., "reasoning",
  "other_model")``) and every ``thoughtSignature`` is removed (``"signature"``), opaque parts
  included; the rest as above.
- **Another format** (anthropic, responses, chat_completions): text parts; images and files as
  ``inlineData`` (inline data, or a ``data:`` URL) or ``fileData`` (any other URL; mimeType
  from the block or guessed from the URL's extension by Python's built-in table); tool calls as
  ``functionCall`` (``args`` the parsed arguments; arguments that are not a JSON object go as
  ``{"arguments": "<text>"}``; ``id`` only when the call had a provider ``item_id``); a tool
  result as ``functionResponse`` ``{"name": <the call's name>, "response": {"output": text}}``
  (``{"error": text}`` when ``is_error``), ``id`` when the call had one, in the order of the
  calls (Gemini pairs by name and order); media inside a tool result is dropped
  (``"media"``, ``"unsupported"``). Reasoning of any kind (Anthropic thinking, redacted
  thinking, Responses reasoning) is dropped (``"other_provider"``), never turned into text;
  the other format's opaque blocks are dropped (``"opaque"``, ``"unsupported"``) and their
  native extras silently.
- **Thought signatures and other models' calls**: every model content that has function calls
  carries a ``thoughtSignature`` on its first ``functionCall`` part — its own when served, else
  ``skip_thought_signature_validator``, the value Gemini documents for history that did not come
  from the model (Gemini 3 checks it strictly in the current function-calling loop).
- ``keep_images=False``: an image part becomes the text part ``[image omitted]``.
- Dropped by construction: empty text parts (unless they carry a served signature) and model
  messages left without parts; a user message left without parts is the text part
  ``[file omitted]`` (it starts a turn, and Gemini's first content must be the user's).

Caveat on byte stability: the fragment is a pure function of the selection and appending a
turn only appends contents, except when the last turn ended on tool results with no model
answer: the next user message then joins that user content.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Iterable, Mapping
from typing import Any, Final

from events.blocks import (
    IMAGE_PLACEHOLDER,
    MEDIA_PLACEHOLDER,
    MediaBlock,
    OpaqueBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
)
from events.formats.gemini.keys import KEYS_MARK, NO_ARGS_MARK, RESPONSE_MARK, SIGNATURE_KEYS, SNAKE
from events.formats.gemini.traits import TRAITS
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
from events.strict_json import NotJsonError, parse_json

__all__ = ["SKIP_SIGNATURE", "render"]

SKIP_SIGNATURE: Final = "skip_thought_signature_validator"
_MIME: Final = mimetypes.MimeTypes(filenames=())  # the built-in table only: the same on every machine


def render(request: RenderRequest, /) -> Rendered:
    drops = _Drops()
    system = [{"text": t} for m in request.system for t in _texts(m) if t]
    if request.summary:
        system.append({"text": request.summary})
    contents: list[dict[str, Any]] = []
    calls: dict[str, ToolCallBlock] = {}  # the served calls of the assistant messages so far, by id
    messages = request.messages
    i = 0
    while i < len(messages):
        selected = messages[i]
        role = selected.message.role
        if role == "tool":
            run = [selected]
            while i + 1 < len(messages) and messages[i + 1].message.role == "tool":
                i += 1
                run.append(messages[i])
            _append(contents, "user", _responses(run, calls, request.target, drops))
        elif role == "assistant":
            parts, served = _model(selected, request.target, drops)
            calls = {c.id: c for c in served}
            _append(contents, "model", parts)
        elif role == "user":
            # A user message none of whose blocks Gemini can carry (another format's opaque
            # blocks) still starts its turn: a placeholder keeps the turn, and the user first.
            _append(contents, "user", _user(selected, request.target, drops) or [{"text": MEDIA_PLACEHOLDER}])
        i += 1
    for content in contents:
        if content["role"] == "model":
            _sign_first_call(content["parts"])
    fragment: dict[str, Any] = {}
    if system:
        fragment["system_instruction"] = {"parts": system}
    fragment["contents"] = contents
    return Rendered(fragment, tuple(drops.items))


class _Drops:
    def __init__(self) -> None:
        self.items: list[Dropped] = []
        self._seen: set[tuple[str, str]] = set()

    def add(self, message_id: str, what: str, reason: DropReason) -> None:
        if (message_id, what) not in self._seen:
            self._seen.add((message_id, what))
            self.items.append(Dropped(message_id, what, reason))


def _append(contents: list[dict[str, Any]], role: str, parts: list[dict[str, Any]]) -> None:
    if not parts:
        return
    if contents and contents[-1]["role"] == role:
        contents[-1]["parts"].extend(parts)
    else:
        contents.append({"role": role, "parts": parts})


def _texts(message: StoredMessage) -> Iterable[str]:
    return (b.text for b in stored_blocks(message) if isinstance(b, TextBlock))


def _reasoning_drop(message: StoredMessage, target: Target) -> DropReason | None:
    # Model-bound (the traits): a Gemini message appended without its model (a bare Content)
    # has signatures that cannot be known to be the target model's, so they are another model's.
    return reasoning_served(message, target, model_bound=TRAITS.model_bound_reasoning)


def _sign_first_call(parts: list[dict[str, Any]]) -> None:
    for part in parts:
        if "functionCall" in part or "function_call" in part:
            if not SIGNATURE_KEYS & part.keys():
                part["thought_signature" if "function_call" in part else "thoughtSignature"] = SKIP_SIGNATURE
            return


class _Native:
    """How one message's blocks are rendered: its own spelling and extras when native."""

    def __init__(self, message: StoredMessage, target: Target, drops: _Drops) -> None:
        self.message = message
        self.drops = drops
        self.native = message.api == "gemini" and extras_served(message, target)
        self.reasoning = _reasoning_drop(message, target)

    def native_extra(self, extra: str | None) -> dict[str, Any]:
        if not self.native or extra is None:
            return {}
        doc: dict[str, Any] = parse_json(extra, stored=True)
        if self.reasoning is not None and SIGNATURE_KEYS & doc.keys():
            doc = {k: v for k, v in doc.items() if k not in SIGNATURE_KEYS}
            self.drops.add(self.message.message_id, "signature", self.reasoning)
        return doc

    def part(self, data_key: str, data: Any, extra: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
        """The part ``{data_key: data, **fields}`` with the native extra merged back."""
        snake = extra.get(KEYS_MARK) == "snake_case"
        key = SNAKE.get(data_key, data_key) if snake else data_key
        part: dict[str, Any] = {key: data}
        for name, value in fields.items():
            if value is not None:
                part[SNAKE.get(name, name) if snake else name] = value
        for k, v in extra.items():
            if k.startswith("$"):
                continue
            if k == key and isinstance(v, dict) and isinstance(data, dict):
                part[k] = {**data, **v}
            else:
                part[k] = v
        return part

    def spelled(self, extra: Mapping[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
        if extra.get(KEYS_MARK) != "snake_case":
            return obj
        return {SNAKE.get(k, k): v for k, v in obj.items()}


def _model(selected: Selected, target: Target, drops: _Drops) -> tuple[list[dict[str, Any]], list[ToolCallBlock]]:
    message = selected.message
    how = _Native(message, target, drops)
    wanted = set(selected.call_ids)
    parts: list[dict[str, Any]] = []
    served: list[ToolCallBlock] = []
    for block in stored_blocks(message):
        if isinstance(block, ToolCallBlock):
            if block.id in wanted:
                served.append(block)
                parts.append(_call(block, how))
        elif isinstance(block, ReasoningBlock):
            if how.native and how.reasoning is None:
                extra = how.native_extra(block.extra)
                thought = how.part("text", block.text, extra, thought=True, thoughtSignature=block.signature)
                if block.text is None:
                    del thought["text"]
                parts.append(thought)
            else:
                drops.add(message.message_id, "reasoning", how.reasoning or "other_provider")
        else:
            parts.extend(_content_part(block, how, keep_images=selected.keep_images))
    return parts, served


def _user(selected: Selected, target: Target, drops: _Drops) -> list[dict[str, Any]]:
    how = _Native(selected.message, target, drops)
    parts: list[dict[str, Any]] = []
    for block in stored_blocks(selected.message):
        if isinstance(block, ReasoningBlock):
            drops.add(selected.message.message_id, "reasoning", how.reasoning or "other_provider")
        elif not isinstance(block, ToolCallBlock):
            parts.extend(_content_part(block, how, keep_images=selected.keep_images))
    return parts


def _content_part(block: object, how: _Native, *, keep_images: bool) -> list[dict[str, Any]]:
    if isinstance(block, TextBlock):
        extra = how.native_extra(block.extra)
        if not block.text and not SIGNATURE_KEYS & extra.keys():
            return []  # Gemini refuses an empty text part
        return [how.part("text", block.text, extra)]
    if isinstance(block, MediaBlock):
        if block.kind == "image" and not keep_images:
            return [{"text": IMAGE_PLACEHOLDER}]
        return _media(block, how)
    if isinstance(block, OpaqueBlock):
        if how.native and block.provider == "gemini":
            doc: dict[str, Any] = parse_json(block.json, stored=True)
            if how.reasoning is not None and SIGNATURE_KEYS & doc.keys():
                doc = {k: v for k, v in doc.items() if k not in SIGNATURE_KEYS}
                how.drops.add(how.message.message_id, "signature", how.reasoning)
            return [doc]
        how.drops.add(how.message.message_id, "opaque", "unsupported")
    return []


def _media(block: MediaBlock, how: _Native) -> list[dict[str, Any]]:
    if how.native:
        extra = how.native_extra(block.extra)
        name = {"displayName": block.filename} if block.filename is not None else {}
        if block.data is not None:
            inline = how.spelled(extra, {"mimeType": block.media_type, "data": block.data, **name})
            return [how.part("inlineData", inline, extra)]
        file = {"fileUri": block.url, **({"mimeType": block.media_type} if block.media_type else {}), **name}
        return [how.part("fileData", how.spelled(extra, file), extra)]
    octet = "application/octet-stream"
    if block.data is not None:
        return [{"inlineData": {"mimeType": block.media_type or octet, "data": block.data}}]
    url = block.url or ""
    if url.startswith("data:"):
        header, _, data = url.partition(",")
        mime = header[5:].split(";", 1)[0] or block.media_type or octet
        if header.endswith(";base64") and data:
            return [{"inlineData": {"mimeType": mime, "data": data}}]
    elif url:
        mime_ = block.media_type or _MIME.guess_type(url.split("?", 1)[0])[0]
        return [{"fileData": {"fileUri": url, **({"mimeType": mime_} if mime_ else {})}}]
    how.drops.add(how.message.message_id, "media", "unsupported")
    return []


def _call(block: ToolCallBlock, how: _Native) -> dict[str, Any]:
    extra = how.native_extra(block.extra)
    call: dict[str, Any] = {"name": block.name}
    if extra.get(NO_ARGS_MARK) != "absent":
        call["args"] = _args(block.arguments)
    if block.item_id is not None:
        call["id"] = block.item_id
    signature = block.signature if how.native else None
    if signature is not None and how.reasoning is not None:
        how.drops.add(how.message.message_id, "signature", how.reasoning)
        signature = None
    return how.part("functionCall", call, extra, thoughtSignature=signature)


def _args(arguments: str) -> dict[str, Any]:
    if not arguments.strip():
        return {}
    try:
        value = parse_json(arguments, stored=True)
    except NotJsonError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": arguments}


def _responses(
    run: list[Selected], calls: Mapping[str, ToolCallBlock], target: Target, drops: _Drops
) -> list[dict[str, Any]]:
    order = {call_id: k for k, call_id in enumerate(calls)}
    parts = []
    natives = True
    for selected in run:
        how = _Native(selected.message, target, drops)
        natives = natives and how.native
        parts.append((order.get(selected.message.tool_call_id or "", len(order)), _response(selected, calls, how)))
    if not natives:  # Gemini pairs responses without ids by name and order: the calls' order
        parts.sort(key=lambda p: p[0])
    return [p for _, p in parts]


def _response(selected: Selected, calls: Mapping[str, ToolCallBlock], how: _Native) -> dict[str, Any]:
    message = selected.message
    call = calls.get(message.tool_call_id or "")
    blocks = stored_blocks(message)
    if how.native:
        for block in blocks:
            if isinstance(block, TextBlock) and block.extra is not None:
                extra = how.native_extra(block.extra)
                if extra.get(RESPONSE_MARK) == "object":
                    body: dict[str, Any] = {}
                    if block.item_id is not None:
                        body["id"] = block.item_id
                    body["name"] = call.name if call is not None else message.name
                    body["response"] = parse_json(block.text, stored=True)
                    return how.part("functionResponse", body, extra)
    texts = []
    for block in blocks:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, MediaBlock):
            how.drops.add(message.message_id, "media", "unsupported")
        elif isinstance(block, OpaqueBlock):
            how.drops.add(message.message_id, "opaque", "unsupported")
    text = "\n".join(texts)
    if not blocks and isinstance(message.content, str):
        text = message.content
    response: dict[str, Any] = {"name": call.name if call is not None else (message.name or "function")}
    response["response"] = {"error": text} if message.is_error else {"output": text}
    if call is not None and call.item_id is not None:
        response["id"] = call.item_id
    return {"functionResponse": response}
