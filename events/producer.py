"""The producer API for chat apps: typed helpers that validate, encode and append events.

Nothing reaches the log unvalidated: a bad event raises :class:`InvalidEventError` naming the
field, before any I/O. ``event_id`` is the idempotency key — pass the same one when retrying
after a :class:`LogUnavailableError` and projections will keep exactly one copy.

A payload in a provider's format (:meth:`ConversationProducer.append_native`, and the
``append_anthropic_message`` / ``append_response`` / ``append_gemini`` helpers) may hold several
messages: every one is validated first, then all are appended as one atomic batch
(:meth:`~events.log.EventLog.append_many`) — in order, contiguous, or none. How their event and
message ids are made is in :mod:`events.batches`; the validated appends themselves, and what an
append answers, in :mod:`events.appending`.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from events.appending import DEFAULT_MAX_EVENT_BYTES, EVENT_TYPE_HEADER, Appended, EventAppender, appended_at
from events.errors import SubjectNotFoundError
from events.event_types import (
    ConversationCleared,
    ConversationErased,
    ConversationStarted,
    Event,
    FinishReason,
    MessageAppended,
    MessageRedacted,
)
from events.keys import ConversationKey
from events.openai_format import (
    ContentInput,
    ToolCallInput,
    UsageInput,
    completion_message,
    content_from_openai,
    message_from_openai,
    requested_message_id,
    tool_calls_from_openai,
    usage_from_openai,
)
from events.sealing.keys import UserSubject

__all__ = [
    "DEFAULT_MAX_EVENT_BYTES",
    "EVENT_TYPE_HEADER",
    "Appended",
    "ConversationErasure",
    "ConversationProducer",
    "UserErasure",
    "appended_at",
]

# Namespace of the event ids append_completion derives from a completion's id (uuid5).
_COMPLETION_NAMESPACE = uuid.UUID("8f0c2f4e-0d7b-4c6e-9a1d-3b5e7c9f1a24")


@dataclass(frozen=True, slots=True)
class ConversationErasure:
    """What erasing a conversation did: its erase event, the keys destroyed (none: plain
    records only, or ``already`` — they were destroyed before)."""

    appended: Appended
    destroyed_key_ids: tuple[str, ...]
    already: bool


@dataclass(frozen=True, slots=True)
class UserErasure:
    """What erasing a user did: an erase event per conversation, the keys destroyed (none:
    ``already`` — they were destroyed before)."""

    erased: tuple[tuple[ConversationKey, Appended], ...]
    destroyed_key_ids: tuple[str, ...]
    already: bool


class ConversationProducer(EventAppender):
    """Appends conversation events to an :class:`~events.log.EventLog`: :class:`EventAppender`'s
    appends, and a helper per kind of event and per provider format."""

    async def append_anthropic_message(
        self, key: ConversationKey, payload: Mapping[str, Any] | Any, *, event_id: str | None = None
    ) -> list[Appended]:
        """An Anthropic ``Message`` response or a ``MessageParam`` (the SDK object or its JSON)."""
        return await self.append_native(key, "anthropic", payload, event_id=event_id)

    async def append_response(
        self, key: ConversationKey, payload: Mapping[str, Any] | Sequence[Any] | Any, *, event_id: str | None = None
    ) -> list[Appended]:
        """An OpenAI Responses response object, one input/output item, or a list of items."""
        return await self.append_native(key, "responses", payload, event_id=event_id)

    async def append_gemini(
        self, key: ConversationKey, payload: Mapping[str, Any] | Any, *, event_id: str | None = None
    ) -> list[Appended]:
        """A Gemini ``Content`` or ``GenerateContentResponse`` (the SDK object or its JSON)."""
        return await self.append_native(key, "gemini", payload, event_id=event_id)

    async def start_conversation(
        self,
        key: ConversationKey,
        *,
        title: str | None = None,
        metadata: Mapping[str, str] | None = None,
        event_id: str | None = None,
    ) -> Appended:
        return await self.append(
            key, ConversationStarted(title=title, metadata=dict(metadata or {})), event_id=event_id
        )

    async def append_message(
        self,
        key: ConversationKey,
        message: Mapping[str, Any],
        *,
        message_id: str | None = None,
        event_id: str | None = None,
    ) -> Appended:
        """Append an OpenAI-format chat message (plus convlog's optional extras)."""
        return await self.append_built(*self.build_message(key, message, message_id=message_id, event_id=event_id))

    def build_message(
        self,
        key: ConversationKey,
        message: Mapping[str, Any],
        *,
        message_id: str | None = None,
        event_id: str | None = None,
    ) -> tuple[Event, bytes]:
        """The event :meth:`append_message` would append, validated and encoded."""
        event_id = event_id or self._new_id()
        requested = requested_message_id(message)  # type-checked: a non-string id is a 422, not a 500
        body = message_from_openai(message, message_id=message_id or (event_id if requested is None else requested))
        return self.build(key, body, event_id=event_id)

    async def append_user(
        self,
        key: ConversationKey,
        content: ContentInput,
        *,
        name: str | None = None,
        message_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        event_id: str | None = None,
    ) -> Appended:
        return await self._message(
            key, event_id, message_id, role="user", content=content, name=name, metadata=metadata
        )

    async def append_system(
        self,
        key: ConversationKey,
        content: ContentInput,
        *,
        name: str | None = None,
        message_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        event_id: str | None = None,
    ) -> Appended:
        return await self._message(
            key, event_id, message_id, role="system", content=content, name=name, metadata=metadata
        )

    async def append_assistant(
        self,
        key: ConversationKey,
        content: ContentInput = None,
        *,
        tool_calls: Sequence[ToolCallInput] = (),
        reasoning_content: str | None = None,
        thinking_duration_ms: int | None = None,
        model: str | None = None,
        usage: UsageInput = None,
        finish_reason: FinishReason | None = None,
        name: str | None = None,
        message_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        event_id: str | None = None,
    ) -> Appended:
        return await self._message(
            key,
            event_id,
            message_id,
            role="assistant",
            content=content,
            name=name,
            metadata=metadata,
            tool_calls=tool_calls_from_openai(tool_calls),
            reasoning_content=reasoning_content,
            thinking_duration_ms=thinking_duration_ms,
            model=model,
            usage=usage_from_openai(usage),
            finish_reason=finish_reason,
        )

    async def append_completion(
        self,
        key: ConversationKey,
        completion: Mapping[str, Any] | Any,
        *,
        choice: int = 0,
        thinking_duration_ms: int | None = None,
        message_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        event_id: str | None = None,
    ) -> Appended:
        """Append the assistant message of a Chat Completions response (the ``openai`` SDK's
        ``ChatCompletion`` or its JSON) with its finish reason, model, usage and reasoning.

        The event id defaults to one derived from the conversation, the completion's ``id`` and
        ``choice``: appending the same response again (a retry after a timeout) is recognised as
        the same event and applied once."""
        message = completion_message(completion, choice=choice)
        if thinking_duration_ms is not None:
            message["thinking_duration_ms"] = thinking_duration_ms
        if metadata:
            message["metadata"] = dict(metadata)
        if event_id is None:
            doc = completion.model_dump() if hasattr(completion, "model_dump") else completion
            completion_id = doc.get("id") if isinstance(doc, Mapping) else None
            if completion_id:
                event_id = str(uuid.uuid5(_COMPLETION_NAMESPACE, f"{key}\n{completion_id}\n{choice}"))
        return await self.append_message(key, message, message_id=message_id, event_id=event_id)

    async def append_tool_result(
        self,
        key: ConversationKey,
        *,
        tool_call_id: str,
        content: ContentInput,
        name: str | None = None,
        message_id: str | None = None,
        metadata: Mapping[str, str] | None = None,
        event_id: str | None = None,
    ) -> Appended:
        return await self._message(
            key,
            event_id,
            message_id,
            role="tool",
            content=content,
            name=name,
            metadata=metadata,
            tool_call_id=tool_call_id,
        )

    async def redact(
        self, key: ConversationKey, message_id: str, *, reason: str, event_id: str | None = None
    ) -> Appended:
        return await self.append(key, MessageRedacted(message_id=message_id, reason=reason), event_id=event_id)

    async def clear(self, key: ConversationKey, *, reason: str | None = None, event_id: str | None = None) -> Appended:
        return await self.append(key, ConversationCleared(reason=reason), event_id=event_id)

    async def erase(
        self,
        key: ConversationKey,
        *,
        reason: str | None = None,
        event_id: str | None = None,
        only_if_last_offset: int | None = None,
        requested_by: str | None = None,
    ) -> Appended:
        """Erase the conversation's content from every read model and, with a key store, from
        every copy (:meth:`erase_conversation`, which also says which keys went). With
        ``only_if_last_offset`` (retention's idle erase) the erase applies only if no event of
        the conversation was applied after that offset, and destroys no key: the fold decides
        it, and a conversation written to since keeps everything."""
        if only_if_last_offset is None:
            erasure = await self.erase_conversation(key, reason=reason, event_id=event_id, requested_by=requested_by)
            return erasure.appended
        erased = ConversationErased(
            reason=reason,
            only_if_last_offset=only_if_last_offset,
            subject="conversation",
            requested_by=requested_by,
        )
        return await self.append(key, erased, event_id=event_id)

    async def erase_conversation(
        self,
        key: ConversationKey,
        *,
        reason: str | None = None,
        event_id: str | None = None,
        requested_by: str | None = None,
    ) -> ConversationErasure:
        """Erase one conversation: with a key store its keys are destroyed first — before the
        erase event is even appended, so no lagging projection or parked record holds it back
        (docs/erasure.md) — then the erase event. ``already``: its keys were destroyed before."""
        destruction = None
        if self._keys is not None:
            # SubjectNotFoundError: plain records only (no key): the read models are all there is to clear
            with contextlib.suppress(SubjectNotFoundError):
                destruction = await self._keys.destroy_conversation(key, requested_by=requested_by, reason=reason)
        erased = ConversationErased(reason=reason, subject="conversation", requested_by=requested_by)
        appended = await self.append(key, erased, event_id=event_id)
        key_ids = destruction.key_ids if destruction else ()
        return ConversationErasure(appended, key_ids, already=destruction is not None and destruction.already)

    async def erase_user(
        self,
        user: UserSubject,
        *,
        conversations: Sequence[ConversationKey] = (),
        reason: str | None = None,
        requested_by: str | None = None,
    ) -> UserErasure:
        """Erase every conversation of ``user``: the user's keys are destroyed first (every
        conversation key of the user unreadable at once), then each conversation gets its erase
        event. ``conversations``: the user's conversations the read models know (plain ones
        have no key); the key store adds those it holds keys of. Raises
        :class:`SubjectNotFoundError` when neither knows the user."""
        destruction = None
        if self._keys is not None:
            try:
                destruction = await self._keys.destroy_user(user, requested_by=requested_by, reason=reason)
            except SubjectNotFoundError:
                if not conversations:
                    raise
        elif not conversations:
            raise SubjectNotFoundError(f"no conversation of user {user.user_id!r}")
        every = {str(c): c for c in (*conversations, *(destruction.conversations if destruction else ()))}
        erased = ConversationErased(reason=reason, subject="user", requested_by=requested_by)
        appended = [(c, await self.append(c, erased)) for _, c in sorted(every.items())]
        key_ids = destruction.key_ids if destruction else ()
        return UserErasure(tuple(appended), key_ids, already=destruction is not None and destruction.already)

    async def _message(
        self,
        key: ConversationKey,
        event_id: str | None,
        message_id: str | None,
        *,
        content: ContentInput,
        metadata: Mapping[str, str] | None,
        **fields: Any,
    ) -> Appended:
        event_id = event_id or self._new_id()
        # Defaulting the message id to the event id keeps a retried append (same event id) identical.
        body = MessageAppended(
            message_id=message_id or event_id,
            content=content_from_openai(content),
            metadata=dict(metadata or {}),
            **fields,
        )
        return await self.append(key, body, event_id=event_id)
