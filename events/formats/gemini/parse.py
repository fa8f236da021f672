"""Google Gemini ``generateContent`` payloads to neutral messages (``?format=gemini``).

Accepted payloads: a ``Content`` (``{"role": "user"|"model", "parts": [...]}``), a list of
Contents (one atomic batch, in order), or a ``GenerateContentResponse`` (its first candidate's
content, with ``usageMetadata``, ``modelVersion``, ``responseId`` and ``finishReason``). Keys
may be camelCase (REST) or snake_case (the Python SDK's ``model_dump``); an SDK object is dumped
first. A part's modelled keys are rendered back in the spelling they came in: a part that used
snake_case spellings records ``"$keys": "snake_case"`` in its block's ``extra`` (``$`` never
starts a proto field name, so it cannot collide with a native key); camelCase is the default.

convlog extension: a bare Content may carry ``"model": "<model name>"`` (the model that wrote a
``model`` content). A Content has no model of its own, and Gemini thought signatures are bound
to the model that made them: without it, a bare model Content's thoughts and signatures are
never served back (they are served only to the same model).

Parts, in their order:

- ``text`` -> TextBlock; with ``thought: true`` -> ReasoningBlock (text, and its
  ``thoughtSignature`` as ``signature``); a ``thoughtSignature`` on a normal text part stays in
  the block's ``extra`` (with every other unmodelled key of the part);
- ``inlineData`` (``mimeType``, ``data``) -> MediaBlock with data; ``fileData`` (``fileUri``,
  ``mimeType``) -> MediaBlock with url; ``displayName`` -> ``filename``; ``image/*`` is an image,
  anything else a file;
- ``functionCall`` (``name``, ``args`` object, optional ``id``) -> ToolCallBlock, ``arguments``
  the compact JSON of ``args``, ``signature`` the part's ``thoughtSignature``, ``item_id`` the
  native id when present. Without an id the call's neutral id is ``<name>:<k>`` (k: its
  ordinal among the same-name calls of that content) and a ``functionResponse`` without id gets
  ``<name>:<k>`` among the same-name responses of its content: Gemini pairs calls and responses
  by name and order, and so do these ids. (They repeat from one content to the next; pairing
  is per tool group.)
- ``functionResponse`` (``name``, ``response`` object, optional ``id``) -> a tool message of its
  own (before the content's other parts, by the neutral convention) with one TextBlock holding
  ``compact_json(response)``; its ``extra`` marks ``"$response": "object"`` and keeps ``name``
  and the part's other keys, so it renders back as the same object. ``is_error`` is True when
  the response object is exactly ``{"error": ...}`` (Gemini's convention), else None;
- the other data Gemini knows (``executableCode``, ``codeExecutionResult``, ``toolCall``,
  ``toolResponse``: :data:`OPAQUE_DATA`) and a non-text part flagged ``thought`` -> OpaqueBlock,
  verbatim. A part with no data of a kind Gemini knows is refused (``empty_part``): served back,
  Gemini would refuse it.

Usage: ``prompt_tokens`` = ``promptTokenCount``; ``completion_tokens`` = ``candidatesTokenCount``
+ ``thoughtsTokenCount`` (Gemini counts thoughts apart; the other formats' output counts include
reasoning); ``cached_tokens`` = ``cachedContentTokenCount``; ``reasoning_tokens`` =
``thoughtsTokenCount``. finish_reason: a content with function calls -> tool_calls,
``MAX_TOKENS`` -> length, safety / recitation / blocklist / prohibited -> content_filter, else stop.
Not kept from a response: other candidates, safety ratings, citation / grounding metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from events.blocks import Block, ReasoningBlock, TextBlock, ToolCallBlock, native_message
from events.errors import NativeFormatError
from events.event_types import FinishReason, MessageAppended, Role, Usage
from events.formats import Parsed
from events.formats.gemini.keys import (
    SIGNATURE,
    Keys,
)
from events.formats.gemini.parts import data_part, function_call, function_response, part_kind
from events.formats.gemini.schema import GEMINI_COUNTS
from events.formats.schema import check_counts
from events.servable import check_nesting

__all__ = ["parse"]

_ROLES: Final[Mapping[str, Role]] = {"user": "user", "model": "assistant"}
_FILTERED: Final = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
        "MODEL_ARMOR",
        "LANGUAGE",
    }
)


def parse(payload: object, *, new_id: Callable[[], str]) -> Parsed:
    doc = _plain(payload)
    check_nesting(doc)
    paths: dict[str, str] = {}
    if isinstance(doc, list):
        if not doc:
            raise NativeFormatError("an empty list of contents", field="", code="empty_batch")
        out: list[MessageAppended] = []
        for i, content in enumerate(doc):
            out.extend(_content(content, f"[{i}]", new_id=new_id, paths=paths))
        return Parsed(tuple(out), answer_paths=paths)
    if not isinstance(doc, Mapping):
        raise NativeFormatError(
            "must be a Content, a list of Contents or a GenerateContentResponse", field="", code="invalid_payload"
        )
    if "candidates" in doc:
        return _response(doc, new_id=new_id)
    return Parsed(tuple(_content(doc, "", new_id=new_id, paths=paths)), answer_paths=paths)


def _plain(payload: object) -> Any:
    dump = getattr(payload, "model_dump", None)
    if callable(dump):  # an SDK object (google.genai.types.*): its JSON form, snake_case keys
        return dump(mode="json", exclude_none=True)
    return payload


def _response(doc: Mapping[str, Any], *, new_id: Callable[[], str]) -> Parsed:
    top = Keys(doc, "")
    candidates = doc.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        raise NativeFormatError(
            "the response has no candidate (a blocked prompt?)", field="candidates", code="no_candidates"
        )
    candidate = candidates[0]
    if not isinstance(candidate, Mapping):
        raise NativeFormatError("must be a Candidate object", field="candidates[0]", code="invalid_payload")
    keys = Keys(candidate, "candidates[0]")
    _, content = keys.get("content")
    if not isinstance(content, Mapping) or not content.get("parts"):  # e.g. MAX_TOKENS spent thinking
        raise NativeFormatError("the candidate has no content", field="candidates[0].content", code="no_content")
    if "role" not in content:
        content = {**content, "role": "model"}
    reason_field, reason = _get(keys, "finishReason", "finish_reason")
    if reason is not None and not isinstance(reason, str):
        raise NativeFormatError("must be a string", field=reason_field, code="invalid_finish_reason")
    model_field, model = _get(top, "modelVersion", "model_version")
    id_field, response_id = _get(top, "responseId", "response_id")
    for f, v in ((model_field, model), (id_field, response_id)):
        if v is not None and not isinstance(v, str):
            raise NativeFormatError("must be a string", field=f, code="invalid_payload")
    usage_field, usage = _get(top, "usageMetadata", "usage_metadata")
    messages = _content(
        content,
        "candidates[0].content",
        new_id=new_id,
        model=model,
        response=True,
        usage=_usage(usage, usage_field),
        finish=reason,
    )
    return Parsed(tuple(messages), native_id=response_id)


def _get(keys: Keys, camel: str, snake: str) -> tuple[str, Any]:
    """A response-level key (not a part key) in either spelling."""
    if camel in keys.obj:
        return f"{keys.field}.{camel}".lstrip("."), keys.obj[camel]
    return f"{keys.field}.{snake}".lstrip("."), keys.obj.get(snake)


def _usage(usage: Any, field: str) -> Usage | None:
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        raise NativeFormatError("must be an object", field=field, code="invalid_usage")
    keys = Keys(usage, field)
    check_counts(usage, [k for pair in GEMINI_COUNTS for k in pair], field, "invalid_usage")
    counts: dict[str, int | None] = {camel: _get(keys, camel, snake)[1] for camel, snake in GEMINI_COUNTS}
    out, thoughts = counts["candidatesTokenCount"], counts["thoughtsTokenCount"]
    completion = None if out is None and thoughts is None else (out or 0) + (thoughts or 0)
    return Usage(
        prompt_tokens=counts["promptTokenCount"],
        completion_tokens=completion,
        cached_tokens=counts["cachedContentTokenCount"],
        reasoning_tokens=thoughts,
    )


def _content(
    content: Any,
    field: str,
    *,
    new_id: Callable[[], str],
    model: str | None = None,
    response: bool = False,
    usage: Usage | None = None,
    finish: str | None = None,
    paths: dict[str, str] | None = None,
) -> list[MessageAppended]:
    """``paths`` is told each tool message's answer path (:attr:`Parsed.answer_paths`)."""
    at = field or "content"
    if not isinstance(content, Mapping):
        raise NativeFormatError("must be a Content object", field=at, code="invalid_content")
    role = content.get("role")
    path = f"{field}.role".lstrip(".")
    if role is None:
        raise NativeFormatError(
            "a Content in a history needs its role (user or model)", field=path, code="missing_role"
        )
    if not isinstance(role, str) or role not in _ROLES:
        raise NativeFormatError(f"unknown role {role!r} (user, model)", field=path, code="unknown_role")
    if response and role != "model":
        raise NativeFormatError("a candidate's content is the model's", field=path, code="unknown_role")
    if not response and "model" in content:
        model = content["model"]
        if not isinstance(model, str) or not model:
            raise NativeFormatError("must be a model name", field=f"{field}.model".lstrip("."), code="invalid_model")
    parts = content.get("parts")
    parts_at = f"{field}.parts".lstrip(".")
    if not isinstance(parts, list):
        raise NativeFormatError("must be a list of parts", field=parts_at, code="invalid_parts")
    if not parts:
        raise NativeFormatError("a Content needs at least one part", field=parts_at, code="empty_parts")
    if role == "model":
        blocks = _model_parts(parts, parts_at)
        calls = any(isinstance(b, ToolCallBlock) for b in blocks)
        message = native_message(
            message_id=new_id(),
            role="assistant",
            blocks=blocks,
            api="gemini",
            provider="google",
            model=model,
            usage=usage,
            finish_reason=_finish(finish, calls=calls) if response else None,
        )
        return [message]
    return _user_parts(parts, parts_at, new_id=new_id, paths={} if paths is None else paths)


def _finish(reason: str | None, *, calls: bool) -> FinishReason:
    if calls:
        return "tool_calls"
    if reason == "MAX_TOKENS":
        return "length"
    if reason in _FILTERED:
        return "content_filter"
    return "stop"


def _model_parts(parts: list[Any], field: str) -> tuple[Block, ...]:
    blocks: list[Block] = []
    ordinals: dict[str, int] = {}
    ids: set[str] = set()
    for i, raw in enumerate(parts):
        at = f"{field}[{i}]"
        part, kind = part_kind(raw, at)
        if kind == "functionResponse":
            raise NativeFormatError(
                "a functionResponse belongs in a user content",
                field=f"{at}.{part.used_key}",
                code="function_response_in_model_content",
            )
        if kind == "functionCall":
            block = function_call(part, at, ordinals)
            if block.id in ids:
                raise NativeFormatError(
                    f"function call id {block.id!r} appears twice in this content",
                    field=f"{at}.{part.used_key}",
                    code="duplicate_function_call_id",
                )
            ids.add(block.id)
            blocks.append(block)
        else:
            blocks.append(data_part(part, kind, at))
    return tuple(blocks)


def _user_parts(
    parts: list[Any], field: str, *, new_id: Callable[[], str], paths: dict[str, str]
) -> list[MessageAppended]:
    tools: list[tuple[str, TextBlock, bool | None, str]] = []
    blocks: list[Block] = []
    ordinals: dict[str, int] = {}
    for i, raw in enumerate(parts):
        at = f"{field}[{i}]"
        part, kind = part_kind(raw, at)
        sig_at, signature = part.keys.get(SIGNATURE)
        if signature is not None:
            raise NativeFormatError(
                "thought signatures come only in the model's contents",
                field=sig_at,
                code="thought_signature_in_user_content",
            )
        if kind == "functionCall":
            raise NativeFormatError(
                "a functionCall belongs in a model content",
                field=f"{at}.{part.used_key}",
                code="function_call_in_user_content",
            )
        if kind == "functionResponse":
            call_id, block, is_error = function_response(part, at, ordinals)
            if any(t[0] == call_id for t in tools):
                raise NativeFormatError(
                    f"function response id {call_id!r} appears twice in this content",
                    field=f"{at}.{part.used_key}",
                    code="duplicate_function_response_id",
                )
            named_by = "id" if block.item_id is not None else "name"  # Gemini pairs by id, else by name
            tools.append((call_id, block, is_error, f"{at}.{part.used_key}.{named_by}"))
            continue
        block_ = data_part(part, kind, at)
        if isinstance(block_, ReasoningBlock):
            raise NativeFormatError(
                "thought parts come only in the model's contents", field=f"{at}.thought", code="thought_in_user_content"
            )
        blocks.append(block_)
    out = []
    for call_id, block, is_error, path in tools:
        out.append(
            native_message(
                message_id=new_id(),
                role="tool",
                blocks=(block,),
                api="gemini",
                provider="google",
                tool_call_id=call_id,
                is_error=is_error,
            )
        )
        paths[out[-1].message_id] = path
    if blocks:
        out.append(
            native_message(message_id=new_id(), role="user", blocks=tuple(blocks), api="gemini", provider="google")
        )
    return out
