"""A message's transcript row: what the fold (projectors/state.py) adds to the transcript for a
``MessageAppended``, its column values made by projectors/row_values.py. Pure."""

from __future__ import annotations

from events.event_types import Event, MessageAppended
from events.log import Coordinates
from projectors.changes import TranscriptRow
from projectors.row_values import content_json, tool_calls_json, usage_json

__all__ = ["transcript_row"]


def transcript_row(
    conversation_key: str,
    epoch: int,
    event: Event,
    msg: MessageAppended,
    at: Coordinates,
    *,
    seq: int,
    turn: int,
    flag: str | None,
    key_id: str | None,
) -> TranscriptRow:
    """The transcript row of message ``msg`` (of ``event``, stored at ``at``) as row ``seq``."""
    return TranscriptRow(
        conversation_key=conversation_key,
        seq=seq,
        partition=at.partition,
        offset=at.offset,
        event_id=event.event_id,
        message_id=msg.message_id,
        role=msg.role,
        content=content_json(msg),
        name=msg.name,
        tool_calls=tool_calls_json(msg),
        tool_call_id=msg.tool_call_id,
        reasoning_content=msg.reasoning_content,
        thinking_duration_ms=msg.thinking_duration_ms,
        finish_reason=msg.finish_reason,
        model=msg.model,
        usage=usage_json(msg),
        metadata=dict(msg.metadata),
        occurred_at=event.occurred_at,
        epoch=epoch,
        turn=turn,
        flag=flag,
        blocks=msg.blocks or None,
        provider=msg.provider,
        api=msg.api,
        is_error=msg.is_error,
        key_id=key_id,
    )
