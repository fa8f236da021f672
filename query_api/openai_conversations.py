"""OpenAI's Conversations API over convlog's log: a conversation as that API shows it, folded
from the conversation's events with the projector's own fold (so it is read-your-writes: it
does not wait for the read models), and its stored messages as Responses items.

- A conversation's ``created_at`` is its first event's time, its ``metadata`` what its
  ``ConversationStarted`` events recorded (later ones add keys or change values, never remove).
  An erased conversation is gone (OpenAI's deleted one): None.
- Its items are the messages of the current epoch (since the last clear) that are neither
  redacted nor erased nor flagged, in log order, each rendered as the Responses items the
  Responses renderer serves for it alone (a message appended as Responses items comes back as
  those items). An item keeps the ``id`` it was stored with (``msg_…``, ``fc_…``, ``rs_…``);
  one stored without an id gets one in OpenAI's shape derived from the message that holds it
  and its place there (``msg_<48 hex>``: stable, and an app that sends its items on to OpenAI's
  Responses API passes that API's id checks). Every item names the message that holds it and how
  many items that message holds (a delete takes out the whole message).
  A message item is listed in OpenAI's shape: ``type`` given, content a list of parts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from events.blocks import ToolCallBlock
from events.codec import EventCodec, default_codec
from events.event_types import Event
from events.formats.rendering import RenderRequest, Selected, Target, stored_blocks
from events.formats.responses.render import render
from events.log import LogRecord
from projectors.applied import apply_decisions
from projectors.fold import BatchInputs, decode_batch, fold_batch
from projectors.tokens import text_counter
from projectors.window import WindowPolicy
from query_api.as_of import stored_message
from query_api.context_types import StoredMessage

__all__ = ["ConversationItem", "OpenAIConversation", "fold_conversation", "message_items"]

_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}
_TARGET_MODEL = "gpt-4o"  # the model items are rendered for when the message records none


@dataclass(frozen=True, slots=True)
class ConversationItem:
    id: str
    message_id: str  # the stored message that holds the item
    siblings: int  # how many items that message holds (this one included)
    body: dict[str, Any]  # the Responses item, with its id


@dataclass(frozen=True, slots=True)
class OpenAIConversation:
    created_at: int  # seconds since the epoch
    metadata: Mapping[str, str]
    items: tuple[ConversationItem, ...]
    open_calls: tuple[str, ...] = ()  # calls of the latest assistant message not answered yet

    def item(self, item_id: str) -> ConversationItem | None:
        return next((item for item in self.items if item.id == item_id), None)


def fold_conversation(
    pairs: Sequence[tuple[LogRecord, Event]], *, max_event_bytes: int, codec: EventCodec | None = None
) -> OpenAIConversation | None:
    """The conversation of these events (its whole history, in log order); None for no events
    or an erased conversation."""
    if not pairs:
        return None
    codec = codec or default_codec()
    decoded = decode_batch([record for record, _ in pairs], codec=codec, max_event_bytes=max_event_bytes)
    out = fold_batch(decoded, BatchInputs({}), policy=WindowPolicy())  # the window plays no part here
    k = str(pairs[0][1].key)
    state = out.states.get(k)
    if state is None or state.erased_at is not None:
        return None
    applied = apply_decisions(out)
    count = text_counter("o200k_base")
    items: list[ConversationItem] = []
    for row in out.transcript:
        message = stored_message(applied.messages[(k, row.seq)], count)
        if row.epoch == state.epoch and not (message.redacted or message.erased or message.flag is not None):
            items.extend(message_items(message))
    created = state.started_at or pairs[0][1].occurred_at
    return OpenAIConversation(int(created.timestamp()), dict(state.metadata), tuple(items), state.open_tool_calls)


def message_items(message: StoredMessage) -> list[ConversationItem]:
    """The Responses items of one stored message, with their ids (see the module docstring)."""
    calls = tuple(b.id for b in stored_blocks(message) if isinstance(b, ToolCallBlock))
    target = Target("responses", model=message.model or _TARGET_MODEL)
    request = RenderRequest(system=(), summary=None, messages=(Selected(message, call_ids=calls),), target=target)
    rendered = render(request).fragment["input"]
    out = []
    for k, item in enumerate(rendered):
        stored_id = item.get("id")
        item_id = stored_id if isinstance(stored_id, str) and stored_id else _derived_id(item, message.message_id, k)
        body = {"id": item_id, **_as_listed(item)}
        out.append(ConversationItem(item_id, message.message_id, len(rendered), body))
    return out


def _as_listed(item: dict[str, Any]) -> dict[str, Any]:
    """A message item as OpenAI's Conversations API lists one (and the SDK types it): with its
    ``type``, its content a list of parts — a string content is one ``input_text`` part (an
    ``output_text`` one for the assistant). The Responses API reads either form alike."""
    if "role" not in item or item.get("type", "message") != "message":
        return item
    content = item.get("content")
    if isinstance(content, str):
        part: dict[str, Any] = {"type": "input_text", "text": content}
        if item["role"] == "assistant":
            part = {"type": "output_text", "text": content, "annotations": []}
        item = {**item, "content": [part]}
    return {"type": "message", **item}


def _derived_id(item: Mapping[str, Any], message_id: str, k: int) -> str:
    """An id in OpenAI's shape (``msg_…``, ``fc_…``, ``fco_…``, else ``item_…``: the Responses API
    checks an input item's id prefix) derived from the message id and the item's place in it."""
    prefix = _PREFIXES.get(str(item.get("type", "message")), "item")
    return f"{prefix}_{hashlib.sha256(f'{message_id}#{k}'.encode()).hexdigest()[:48]}"
