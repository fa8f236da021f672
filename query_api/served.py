"""One context, as the API serves it: assembled ``as_of`` a log offset, and its JSON body.

Shared by the HTTP API and ``convlog replay`` so that both serve, byte for byte, the same
context for the same request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from typing import Any

from events.codec import EventCodec
from events.event_types import Event
from events.formats.registry import FORMATS
from events.keys import ConversationKey
from events.log import EventLog, LogRecord
from projectors.tokens import DEFAULT_COUNTED, cached_counter
from projectors.window import WindowPolicy
from query_api.as_of import BeforeMessage, PolicyAt, context_inputs_as_of
from query_api.context import assemble
from query_api.context_types import Context, ContextRequest, ModelSpec
from query_api.ports import ContextInputs


async def context_as_of(
    log: EventLog,
    key: ConversationKey,
    point: int | BeforeMessage,
    *,
    request: ContextRequest,
    spec: ModelSpec,
    policy: WindowPolicy | PolicyAt,
    max_event_bytes: int,
    start_offset: int,
    pairs: Sequence[tuple[LogRecord, Event]] | None = None,
    codec: EventCodec | None = None,
) -> tuple[Context, ContextInputs] | None:
    """The context served right after the event at offset ``point`` (or right before a message),
    rebuilt from the log; None if the conversation had no event by then. ``pairs``: the
    conversation's events already read (else its partition is scanned from ``start_offset``)."""
    inputs = await context_inputs_as_of(
        log,
        key,
        point,
        encoding=spec.encoding,
        policy=policy,
        max_event_bytes=max_event_bytes,
        start_offset=start_offset,
        pairs=pairs,
        codec=codec,
    )
    if inputs is None:
        return None
    ctx = assemble(
        system=inputs.system,
        summary=inputs.summary,
        messages=inputs.messages,
        request=request,
        spec=spec,
        count=cached_counter(spec.encoding),
    )
    return ctx, inputs


def context_body(
    ctx: Context, inputs: ContextInputs, spec: ModelSpec, *, counted: Collection[str] = DEFAULT_COUNTED
) -> dict[str, Any]:
    """The JSON body of the context endpoint: the format's request fragment under the provider's
    own keys, beside the accounting. ``counted``: the encodings the projector stores counts of
    (``CONVLOG_TOKEN_ENCODINGS``); a context in another one says ``counted_at_read`` — a
    property of the settings, not of the request, so that ``as_of`` rebuilds the same body."""
    summary = ctx.summary
    body: dict[str, Any] = dict(ctx.fragment)
    body.update(
        {
            "format": ctx.format,
            "token_count": ctx.token_count,
            "encoding": ctx.encoding,
            "encoding_estimated": spec.estimated,
            "summary": None
            if summary is None
            else {
                "summary_id": summary.summary_id,
                "text": summary.text,
                "covers_through_seq": summary.covers_through_seq,
            },
            "dropped_turns": ctx.dropped_turns,
            "dropped": [{"message_id": d.message_id, "what": d.what, "reason": d.reason} for d in ctx.dropped],
            "compressed": ctx.compressed,
            "edits": [
                {"kind": e.kind, "cleared_tokens": e.cleared_tokens, "messages": list(e.messages)} for e in ctx.edits
            ],
            "degraded": inputs.parked,
            "position": {"partition": inputs.partition, "offset": inputs.last_offset},
        }
    )
    if ctx.encoding not in counted:  # only then: every other body stays as it was
        body["counted_at_read"] = True
    if ctx.estimate is not None:
        body["estimate"] = ctx.estimate.as_json()
    if FORMATS.traits(ctx.format).prompt_cache_key:
        body["prompt_cache_key"] = prompt_cache_key(inputs.conversation_key)
    return body


def prompt_cache_key(key: ConversationKey) -> str:
    """OpenAI routes requests with the same ``prompt_cache_key`` to the same cache: one per
    conversation, derived (not the key itself, which names the tenant and user)."""
    return "convlog-" + hashlib.sha256(str(key).encode()).hexdigest()[:32]
