"""The event ids and message ids of a batch: one native payload appended as several events.

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
from collections.abc import Callable

__all__ = ["batch_event_ids", "message_ids_from"]

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
