"""``convlog replay`` and ``convlog tail``: one conversation, read from the log.

``replay`` rebuilds the context with the API's ``as_of`` code path
(:func:`query_api.as_of.context_inputs_as_of`, then :func:`query_api.context.assemble`), so
what it prints is what was (or would have been) served right after that event.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Collection

from tqdm import tqdm

from convlog.render import format_line
from convlog.resources import ReadModelsHandle
from events.codec import EventCodec, default_codec
from events.errors import ConvlogError, DecodeError
from events.event_types import Event
from events.keys import ConversationKey, partition_for_key
from events.log import EventLog, LogRecord
from events.reading import conversation_events
from pgstore.pool import pg_errors
from pgstore.transcripts import first_offset as stored_first_offset
from projectors.tokens import DEFAULT_COUNTED, model_spec
from projectors.window import WindowPolicy
from query_api.as_of import BeforeMessage, PolicyAt, as_of_offset, refuse_beyond_log_end
from query_api.context_types import ContextRequest
from query_api.served import context_as_of, context_body


async def first_offset(handle: ReadModelsHandle, key: ConversationKey) -> int | None:
    """Where the conversation starts on its partition, per the live read models (None: unknown
    to them — the projection may lag, so callers then read the partition from 0)."""
    with pg_errors(f"look up {key}"):
        return await stored_first_offset(handle.pool, handle.schema, str(key))


async def replay(
    event_log: EventLog,
    key: ConversationKey,
    *,
    as_of: int | BeforeMessage | None,
    start_offset: int,
    request: ContextRequest,
    max_event_bytes: int,
    policy: WindowPolicy | PolicyAt,
    default_encoding: str,
    counted: Collection[str] = DEFAULT_COUNTED,
    out: Callable[[str], None] = print,
    codec: EventCodec | None = None,
) -> int:
    """Print the conversation's events and the context served right after ``as_of`` (default:
    its last event; a :class:`BeforeMessage`: right before that message was appended). Returns
    the number of events; raises if there are none by then, no such message, an offset past the
    log's end, or a reserve that leaves the budget nothing."""
    request.refuse_no_room()
    if isinstance(as_of, int):  # as the API's as_of: no context "after" an event the log does not hold
        await refuse_beyond_log_end(event_log, partition_for_key(key.encode(), event_log.partition_count), as_of)
    pairs = await _read_with_progress(event_log, key, start_offset, codec)
    if not pairs:
        raise ConvlogError(f"the log has no events of {key}")
    point = pairs[-1][0].offset if as_of is None else as_of_offset(pairs, as_of)
    why = f", right before message {as_of.message_id!r}" if isinstance(as_of, BeforeMessage) else ""
    out(f"conversation {key}  (partition {pairs[0][0].partition}, context as of offset {point}{why})")
    for record, event in pairs:
        marker = "  " if record.offset <= point else "+ "  # "+": after the as-of point, not in the context
        out(marker + format_line(record, event).lstrip())
    later = sum(1 for record, _ in pairs if record.offset > point)
    out(f"({len(pairs)} events{f'; {later} after offset {point}, marked +' if later else ''})\n")
    spec = model_spec(request.model, default_encoding=default_encoding)
    served = await context_as_of(
        event_log,
        key,
        point,
        request=request,
        spec=spec,
        policy=policy,
        max_event_bytes=max_event_bytes,
        start_offset=start_offset,
        codec=codec,
    )
    if served is None:
        raise ConvlogError(f"{key} had no event by offset {point}")
    out(f"context as of offset {point} (model {request.model}, budget {request.budget_tokens} tokens):")
    out(json.dumps(context_body(*served, spec, counted=counted), indent=2, ensure_ascii=False))
    return len(pairs)


async def _read_with_progress(
    event_log: EventLog, key: ConversationKey, start: int, codec: EventCodec | None
) -> list[tuple[LogRecord, Event]]:
    """The conversation's events; a long partition shows a bar (offsets scanned, rate, ETA)."""
    end = (await event_log.end_offsets())[partition_for_key(key.encode(), event_log.partition_count)]
    pairs = []
    with tqdm(total=max(0, end - start), unit="offset", unit_scale=True, desc="reading", leave=False, delay=1) as bar:
        async for record, event in conversation_events(event_log, key, start_offset=start, codec=codec):
            bar.update(record.offset + 1 - start - bar.n)
            pairs.append((record, event))
    return pairs


async def follow(
    event_log: EventLog,
    key: ConversationKey,
    *,
    start_offset: int | None,
    stop: asyncio.Event,
    out: Callable[[str], None],
    poll_s: float = 1.0,
    codec: EventCodec | None = None,
) -> int:
    """Print the conversation's events as they arrive until ``stop`` is set; from
    ``start_offset`` on, or only new ones when it is None. Returns how many were printed."""
    raw_key = key.encode()
    partition = partition_for_key(raw_key, event_log.partition_count)
    position = (await event_log.end_offsets())[partition] if start_offset is None else start_offset
    codec = codec or default_codec()
    printed = 0
    out(f"following {key} on partition {partition} from offset {position} (Ctrl-C to stop)")
    while not stop.is_set():
        batch = await event_log.read({partition: position}, max_records=500, timeout_s=poll_s)
        position = batch.positions.get(partition, position)  # past transaction markers too
        for record in batch.records:
            if record.key != raw_key:
                continue
            try:
                out(format_line(record, codec.decode(record.value)))
            except DecodeError as e:
                out(f"  p{record.partition}@{record.offset:<6} undecodable ({e}): {record.value[:64].hex()}")
            printed += 1
    return printed
