"""convlog as the session of the OpenAI Agents SDK (``pip install 'convlog[agents]'``).

    from agents import Agent, Runner
    from convlog.integrations.agents import ConvlogSession

    session = ConvlogSession("conversation-1", user_id="u1", model="gpt-4o", budget_tokens=16_000)
    result = await Runner.run(agent, "Hi", session=session)   # instead of SQLiteSession("conversation-1")

``session_id`` is the convlog conversation id. What each method does, and why:

- ``add_items(items)`` appends the Runner's items (messages, ``function_call``,
  ``function_call_output``, ``reasoning``, any other item) as ONE Responses payload
  (``?format=responses``: one atomic batch, lossless). Idempotent: the Idempotency-Key is
  derived from the items' content and a slot per session object — a retry of a failed or
  cancelled ``add_items`` with the same items reuses the failed call's slot, so it is stored
  once even when the first try reached the service; a later successful ``add_items`` of the
  same items (a user saying "yes" twice, the SDK restoring items it popped) takes a new slot
  and is stored again; different items always have different keys. A new session object (a
  new process) starts new slots: it cannot tell a resent batch from a repeated one.
  An output whose call is neither in the batch nor open in the conversation is refused by the
  service (:class:`~convlog.client.RejectedEventError`, code ``orphan_tool_result``).
- ``get_items()`` is the context convlog would send the model: windowed, summarised, within
  ``budget_tokens`` for ``model``, as Responses input items; never an unanswered
  ``function_call``, an output without its call, or a reasoning item without the item it
  belongs to. The context's ``instructions`` (the conversation's system messages and its
  summary) lead as one ``{"role": "system", "content": ...}`` item, since session items are
  input items only. ``get_items(limit=n)`` (or ``session_settings.limit``) is the newest
  items of that list, at most ``n``: the cut moves later (fewer items, never more) until it
  splits nothing — no output whose call was cut, no item whose reasoning was cut.
- ``pop_item()`` removes the newest served item with a ``MessageRedacted`` event (the audit
  keeps that it existed) and returns it. An item is part of a stored message: a user message
  or a tool output is one item; an assistant message may be several (reasoning, text, calls).
  Popping the last item of a several-item message redacts the message and appends its other
  served items again as a new message, so exactly one item leaves what is served (a reasoning
  item left last is stored but not served: never a reasoning item without its item). Popping
  an output hides its call too (and the reasoning before it): convlog never serves a call
  without its output, and the call counts as answered, so an output sent for it again is
  refused (``orphan_tool_result``) — where a SQLite session would go on sending the model the
  call alone, which the API refuses. The unserved blocks of a popped message (calls never
  answered) are not appended again.
- ``clear_session()`` is convlog's clear: a new chat, the window and summary restart, the
  audit keeps everything.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, cast

from agents.items import TResponseInputItem
from agents.memory import SessionABC, SessionSettings
from agents.memory.session_settings import coerce_session_settings, resolve_session_limit

from convlog.client import AsyncConvlogClient, NotFoundError, TranscriptMessage

__all__ = ["ConvlogSession"]

_KEYS = uuid.UUID("6f1d3c2e-5b8a-4c57-9e0d-2a7b1f4c8e31")  # the namespace of the derived Idempotency-Keys
_POP_REASON = "popped by the OpenAI Agents SDK session (pop_item)"
_USER_SIDE = frozenset({"user", "system", "developer"})


class ConvlogSession(SessionABC):
    """An Agents SDK session backed by a convlog conversation (see the module docstring).
    ``client`` defaults to an :class:`AsyncConvlogClient` from ``CONVLOG_URL`` /
    ``CONVLOG_TOKEN``, closed by :meth:`aclose`; a client passed in stays the caller's."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        *,
        client: AsyncConvlogClient | None = None,
        user_id: str,
        model: str = "gpt-4o",
        budget_tokens: int = 32_000,
        reserve_tokens: int = 0,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.user_id = user_id
        self.model = model
        self.budget_tokens = budget_tokens
        self.reserve_tokens = reserve_tokens
        self.session_settings = coerce_session_settings(session_settings or SessionSettings())
        self._owns_client = client is None
        self.client = client if client is not None else AsyncConvlogClient()
        self._min_offset: int | None = None  # the newest write of this object: reads wait for it
        self._scope = uuid.uuid4().hex  # keys of this object only (see the module docstring)
        self._next_slot: defaultdict[str, int] = defaultdict(int)
        self._free_slots: defaultdict[str, list[int]] = defaultdict(list)

    async def aclose(self) -> None:
        if self._owns_client:
            await self.client.aclose()

    # --- the Session interface -------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        items, _ = await self._served()
        return cast("list[TResponseInputItem]", items if limit is None else newest_items(items, limit))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if not items:
            return
        payload = [_plain(item) for item in items]
        await self._append(payload, content=json.dumps(payload, sort_keys=True, separators=(",", ":")))

    async def pop_item(self) -> TResponseInputItem | None:
        served, leading = await self._served()
        if not served:
            return None
        last = served[-1]
        holder = await self._holder(last, leading=leading and len(served) == 1)
        if holder is None:  # only a summary is left: nothing stored to pop
            return None
        redacted = await self.client.redact(self.user_id, self.session_id, holder.message_id, reason=_POP_REASON)
        self._wrote(redacted.offset)
        if holder.role != "assistant":
            return cast("TResponseInputItem", last if holder.role != "system" else _system_item(holder))
        left, left_leading = await self._served()
        gone = served[kept_after_pop(served, left, leading=(leading, left_leading)) :]  # the holder's served items
        if len(gone) > 1:  # the other items of the message stay served: a new message holds them
            rest = gone[:-1]
            await self._append(rest, content=f"pop {redacted.last.event_id}")
        return cast("TResponseInputItem", gone[-1] if gone else last)

    async def clear_session(self) -> None:
        try:
            cleared = await self.client.clear(self.user_id, self.session_id)
        except NotFoundError:
            return  # nothing was ever stored: already clear
        self._wrote(cleared.offset)

    # --- convlog ----------------------------------------------------------------------------

    async def _served(self) -> tuple[list[dict[str, Any]], bool]:
        """The context as input items, the instructions (system messages, summary) first, and
        whether there are instructions."""
        try:
            context = await self.client.context(
                self.user_id,
                self.session_id,
                model=self.model,
                budget_tokens=self.budget_tokens,
                reserve_tokens=self.reserve_tokens,
                format="responses",
                min_offset=self._min_offset,
            )
        except NotFoundError:
            return [], False
        items = [dict(item) for item in context.input or ()]
        instructions = context.instructions
        return ([{"role": "system", "content": instructions}, *items], True) if instructions else (items, False)

    async def _append(self, payload: Sequence[Any], *, content: str) -> None:
        digest = hashlib.sha256(content.encode()).hexdigest()
        free = self._free_slots[digest]
        if free:
            slot = free.pop(0)
        else:
            slot = self._next_slot[digest]
            self._next_slot[digest] += 1
        key = str(uuid.uuid5(_KEYS, f"{self._scope}\n{self.user_id}\n{self.session_id}\n{slot}\n{digest}"))
        try:
            appended = await self.client.append(
                self.user_id, self.session_id, list(payload), format="responses", idempotency_key=key
            )
        except BaseException:  # maybe stored: the retry of these items takes this slot again
            free.append(slot)
            free.sort()
            raise
        self._wrote(appended.offset)

    def _wrote(self, offset: int) -> None:
        self._min_offset = offset if self._min_offset is None else max(self._min_offset, offset)

    async def _holder(self, item: Mapping[str, Any], *, leading: bool) -> TranscriptMessage | None:
        """The stored message that holds the newest served ``item``: the newest usable message
        of the current epoch that can hold it (newer ones are not served: an assistant message
        of unanswered calls only, ...)."""
        epoch: int | None = None
        async for page in self.client.message_pages(self.user_id, self.session_id, limit=50):
            for message in reversed(page.messages):
                if epoch is None:
                    epoch = message.raw.get("epoch")
                if message.raw.get("epoch") != epoch:
                    return None
                usable = not (message.redacted or message.erased or message.raw.get("flag") is not None)
                if usable and _holds(message, item, leading=leading):
                    return message
        return None


def newest_items(items: Sequence[Mapping[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` items or fewer, cut where the cut splits nothing: no
    ``function_call_output`` whose ``function_call`` is cut off, no item whose reasoning item
    (just before it) is cut off when the item has an id (the API binds an item with an id to its
    reasoning; an item without one stands alone)."""
    start = max(0, len(items) - limit)
    while start < len(items) and not _clean_cut(items, start):
        start += 1
    return [dict(item) for item in items[start:]]


def _clean_cut(items: Sequence[Mapping[str, Any]], start: int) -> bool:
    if start > 0 and items[start - 1].get("type") == "reasoning" and items[start].get("id") is not None:
        return False
    calls = {item.get("call_id") for item in items[start:] if item.get("type") == "function_call"}
    return all(item.get("call_id") in calls for item in items[start:] if item.get("type") == "function_call_output")


def _holds(message: TranscriptMessage, item: Mapping[str, Any], *, leading: bool) -> bool:
    if leading:
        return message.role == "system"
    kind = item.get("type", "message")
    if kind == "function_call_output":
        return message.role == "tool" and message.tool_call_id == item.get("call_id")
    if kind == "message" and item.get("role") in _USER_SIDE:
        return message.role == "user"
    if message.role != "assistant":
        return False
    if kind == "message":  # the message's text is served: the holder has text
        return bool(message.content)
    return True


def kept_after_pop(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], *, leading: tuple[bool, bool]
) -> int:
    """How many leading items of ``before`` (the items served before a pop) are not the popped
    message's: ``before[kept:]`` are its served items, in order. ``leading`` says whether each
    list starts with the instructions item.

    What is served may change at its front between the two reads, beside the pop: a budget may
    let older items in once the popped ones are gone (``after`` ends with ``before[:kept]``), and
    a summary recorded meanwhile replaces the instructions and covers the oldest items (``after``'s
    items are a tail of what is left). Taking the whole list as popped then re-appended the
    conversation's served history as a new message: every turn the summary had just covered came
    back. So the items are lined up without the instructions; another writer's message appended
    meanwhile (the tails then differ) leaves only the trailing items an assistant message gives
    as popped, never the whole list."""
    for kept in range(len(before) - 1, 0, -1):
        if kept <= len(after) and list(after[len(after) - kept :]) == list(before[:kept]):
            return kept
    mine, theirs = list(before[1:] if leading[0] else before), list(after[1:] if leading[1] else after)
    for popped in range(1, len(mine)):
        left = mine[: len(mine) - popped]
        shorter = min(len(left), len(theirs))
        if shorter and left[len(left) - shorter :] == theirs[len(theirs) - shorter :]:
            return len(before) - popped
    # Nothing lines up (the summary covers every other item, or another writer appended): the
    # popped message's items are the trailing run only an assistant message gives.
    popped = 0
    while popped < len(mine) and _assistant_side(mine[len(mine) - 1 - popped]):
        popped += 1
    return len(before) - max(popped, 1)


def _assistant_side(item: Mapping[str, Any]) -> bool:
    kind = item.get("type", "message")
    return kind in {"reasoning", "function_call"} or (kind == "message" and item.get("role") == "assistant")


def _system_item(message: TranscriptMessage) -> dict[str, Any]:
    content = message.content
    return {"role": "system", "content": content if isinstance(content, str | list) else ""}


def _plain(item: Any) -> Any:
    """An item as JSON data (the SDK passes TypedDicts, but a pydantic item may slip in)."""
    dump = getattr(item, "model_dump", None)
    return dump(mode="json", exclude_none=True) if callable(dump) else item
