"""A batch: one payload (a Chat Completions list, a provider's native JSON) appended as several
events — the payload parsed into its messages, and their event and message ids.

- With an explicit ``event_id`` ``k`` (the HTTP ``Idempotency-Key``): message 0 gets ``k``
  itself — so one message appended with a key is stored exactly as before batches existed —
  and message ``i >= 1`` gets ``f"{k}/{i}"``.
- Without one, when the payload carries the provider's own id (:attr:`Parsed.native_id`: an
  Anthropic ``msg_…``, a Responses ``resp_…``): a uuid5 of (conversation, format, native id,
  index), so the same response appended twice is the same events, applied once.
- Else random: a uuid4 for message 0, then ``f"{first}/{i}"``.

Message ids a payload does not name come from the parser's ``new_id`` callback, called in
message order: the batch's first event id, then ``f"{first}/{n}"`` for the n-th call — as
deterministic as the first event id is.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from events.errors import NativeFormatError
from events.event_types import Event, EventBody, MessageAppended
from events.formats import registry
from events.formats.registry import FormatRegistry

__all__ = ["BatchIds", "NativeBatch", "batch_event_ids", "message_ids_from", "parse_payload"]

# Namespace of the event ids derived from a native payload's own id (uuid5).
_NATIVE_NAMESPACE = uuid.UUID("4b7e3f0a-61c2-4d8e-9f35-0c2a7d9e5b18")


def batch_event_ids(first: str, count: int, *, conversation: str, format: str, native_id: str | None) -> list[str]:  # noqa: A002
    """The event ids of a batch of ``count`` whose first id is ``first`` (see the module doc);
    ``native_id`` given: derived from it instead, ``first`` unused."""
    if native_id is not None:
        return [native_event_id(conversation, format, native_id, i) for i in range(count)]
    return [first if i == 0 else f"{first}/{i}" for i in range(count)]


def native_event_id(conversation: str, format: str, native_id: str, index: int) -> str:  # noqa: A002
    return str(uuid.uuid5(_NATIVE_NAMESPACE, f"{conversation}\n{format}\n{native_id}\n{index}"))


def message_ids_from(first: str) -> Callable[[], str]:
    """A ``new_id`` callback: ``first``, then ``first/1``, ``first/2``..."""
    calls = 0

    def new_id() -> str:
        nonlocal calls
        calls += 1
        return first if calls == 1 else f"{first}/{calls - 1}"

    return new_id


@dataclass(frozen=True, slots=True)
class BatchIds:
    """A payload's messages and the event id of each; ``next_event_id`` the one one more message
    would have had; ``deterministic``: the ids follow from the request alone (an explicit event
    id or the payload's native id), so the same payload again makes the same events."""

    messages: tuple[MessageAppended, ...]
    event_ids: tuple[str, ...]
    next_event_id: str
    deterministic: bool
    answer_paths: Mapping[str, str] = field(default_factory=dict)  # as Parsed's


def parse_payload(
    conversation: str,
    format: str,  # noqa: A002
    payload: object,
    *,
    event_id: str | None,
    new_id: Callable[[], str],
    formats: FormatRegistry | None = None,
) -> BatchIds:
    """Parse ``payload`` with ``format``'s parser, its message ids from the batch's first event id
    (parsed twice when that follows from the payload's own id). A payload of no message is a
    :class:`NativeFormatError` (``empty_payload``). ``formats``: where ``format`` is looked up
    (None: :data:`events.formats.registry.FORMATS`, read when called)."""
    parse = (formats or registry.FORMATS).parser_for(format)
    first = event_id or new_id()
    parsed = parse(payload, new_id=message_ids_from(first))
    native_id = None if event_id is not None else parsed.native_id
    if native_id is not None:  # ids follow from the payload's own id: parse again with those
        first = native_event_id(conversation, format, native_id, 0)
        parsed = parse(payload, new_id=message_ids_from(first))
    if not parsed.messages:
        raise NativeFormatError("the payload holds no message", field=None, code="empty_payload")
    *ids, following = batch_event_ids(
        first, len(parsed.messages) + 1, conversation=conversation, format=format, native_id=native_id
    )
    deterministic = event_id is not None or native_id is not None
    return BatchIds(parsed.messages, tuple(ids), following, deterministic, parsed.answer_paths)


@dataclass(frozen=True, slots=True)
class NativeBatch:
    """The events of one payload, validated and encoded, ready to append as one batch (see
    :class:`BatchIds` for ``deterministic`` and ``next_event_id``: a stored batch holding a
    record with that id right after these is a longer payload, not this one)."""

    built: tuple[tuple[Event, bytes], ...]
    deterministic: bool
    next_event_id: str | None = None
    answer_paths: Mapping[str, str] = field(default_factory=dict)  # as Parsed's
    # The bodies as the payload gave them, when ``built`` holds them sealed (events/sealing/):
    # what checks of the payload's content (orphan tool results) read.
    plain: tuple[EventBody, ...] | None = None

    def answer_path(self, index: int) -> str:
        """Where the payload names the call its ``index``-th message answers (else ``messages[i]``)."""
        body = self.built[index][0].body
        message_id = body.message_id if isinstance(body, MessageAppended) else ""
        return self.answer_paths.get(message_id, f"messages[{index}]")

    @property
    def events(self) -> tuple[Event, ...]:
        """The payload's events, with their content (never their sealed copies)."""
        if self.plain is None:
            return tuple(event for event, _ in self.built)
        return tuple(replace(event, body=body) for (event, _), body in zip(self.built, self.plain, strict=True))
