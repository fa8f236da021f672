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
from typing import Any, Final, Literal

from events.blocks import Block, MediaBlock, OpaqueBlock, ReasoningBlock, TextBlock, ToolCallBlock, native_message
from events.errors import NativeFormatError
from events.event_types import FinishReason, MessageAppended, Role, Usage
from events.formats import Parsed
from events.formats.gemini.keys import (
    DATA_KEYS,
    KEYS_MARK,
    MODELLED_DATA,
    NO_ARGS_MARK,
    OPAQUE_DATA,
    RESPONSE_MARK,
    SIGNATURE,
    SNAKE,
    is_base64,
)
from events.formats.schema import GEMINI_COUNTS, GEMINI_DATA, GEMINI_PART, check_counts, check_fields
from events.servable import check_nesting
from events.strict_json import compact_json

__all__ = ["parse"]

_ROLES: Final[Mapping[str, Role]] = {"user": "user", "model": "assistant"}
_FILTERED: Final = frozenset(
    {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
     "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION", "MODEL_ARMOR", "LANGUAGE"}
)  # fmt: skip


class _Keys:
    """Reads one JSON object's keys in either spelling and remembers which were used."""

    def __init__(self, obj: Mapping[str, Any], field: str) -> None:
        self.obj = obj
        self.field = field
        self.used: set[str] = set()
        self.snake = False

    def get(self, camel: str) -> tuple[str, Any]:
        """``(json path, value)`` of ``camel`` or its snake_case spelling; value None if absent."""
        snake = SNAKE.get(camel, camel)
        if camel in self.obj and snake != camel and snake in self.obj:
            raise NativeFormatError(f"both {camel} and {snake} are set", field=f"{self.field}.{snake}",
                                    code="duplicate_field")  # fmt: skip
        key = snake if snake in self.obj and snake != camel else camel
        if key in self.obj:
            self.used.add(key)
            self.snake = self.snake or key != camel
        return f"{self.field}.{key}", self.obj.get(key)

    def leftover(self) -> dict[str, Any]:
        return {k: v for k, v in self.obj.items() if k not in self.used}


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
        raise NativeFormatError("must be a Content, a list of Contents or a GenerateContentResponse",
                                field="", code="invalid_payload")  # fmt: skip
    if "candidates" in doc:
        return _response(doc, new_id=new_id)
    return Parsed(tuple(_content(doc, "", new_id=new_id, paths=paths)), answer_paths=paths)


def _plain(payload: object) -> Any:
    dump = getattr(payload, "model_dump", None)
    if callable(dump):  # an SDK object (google.genai.types.*): its JSON form, snake_case keys
        return dump(mode="json", exclude_none=True)
    return payload


def _response(doc: Mapping[str, Any], *, new_id: Callable[[], str]) -> Parsed:
    top = _Keys(doc, "")
    candidates = doc.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        raise NativeFormatError("the response has no candidate (a blocked prompt?)", field="candidates",
                                code="no_candidates")  # fmt: skip
    candidate = candidates[0]
    if not isinstance(candidate, Mapping):
        raise NativeFormatError("must be a Candidate object", field="candidates[0]", code="invalid_payload")
    keys = _Keys(candidate, "candidates[0]")
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
    messages = _content(content, "candidates[0].content", new_id=new_id, model=model, response=True,
                        usage=_usage(usage, usage_field), finish=reason)  # fmt: skip
    return Parsed(tuple(messages), native_id=response_id)


def _get(keys: _Keys, camel: str, snake: str) -> tuple[str, Any]:
    """A response-level key (not a part key) in either spelling."""
    if camel in keys.obj:
        return f"{keys.field}.{camel}".lstrip("."), keys.obj[camel]
    return f"{keys.field}.{snake}".lstrip("."), keys.obj.get(snake)


def _usage(usage: Any, field: str) -> Usage | None:
    if usage is None:
        return None
    if not isinstance(usage, Mapping):
        raise NativeFormatError("must be an object", field=field, code="invalid_usage")
    keys = _Keys(usage, field)
    check_counts(usage, [k for pair in GEMINI_COUNTS for k in pair], field, "invalid_usage")
    counts: dict[str, int | None] = {camel: _get(keys, camel, snake)[1] for camel, snake in GEMINI_COUNTS}
    out, thoughts = counts["candidatesTokenCount"], counts["thoughtsTokenCount"]
    completion = None if out is None and thoughts is None else (out or 0) + (thoughts or 0)
    return Usage(prompt_tokens=counts["promptTokenCount"], completion_tokens=completion,
                 cached_tokens=counts["cachedContentTokenCount"], reasoning_tokens=thoughts)  # fmt: skip


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
        raise NativeFormatError("a Content in a history needs its role (user or model)", field=path,
                                code="missing_role")  # fmt: skip
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
            message_id=new_id(), role="assistant", blocks=blocks, api="gemini", provider="google", model=model,
            usage=usage, finish_reason=_finish(finish, calls=calls) if response else None,
        )  # fmt: skip
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
        part, kind = _part_kind(raw, at)
        if kind == "functionResponse":
            raise NativeFormatError("a functionResponse belongs in a user content", field=f"{at}.{part.used_key}",
                                    code="function_response_in_model_content")  # fmt: skip
        if kind == "functionCall":
            block = _function_call(part, at, ordinals)
            if block.id in ids:
                raise NativeFormatError(f"function call id {block.id!r} appears twice in this content",
                                        field=f"{at}.{part.used_key}", code="duplicate_function_call_id")  # fmt: skip
            ids.add(block.id)
            blocks.append(block)
        else:
            blocks.append(_data_part(part, kind, at))
    return tuple(blocks)


def _user_parts(
    parts: list[Any], field: str, *, new_id: Callable[[], str], paths: dict[str, str]
) -> list[MessageAppended]:
    tools: list[tuple[str, TextBlock, bool | None, str]] = []
    blocks: list[Block] = []
    ordinals: dict[str, int] = {}
    for i, raw in enumerate(parts):
        at = f"{field}[{i}]"
        part, kind = _part_kind(raw, at)
        sig_at, signature = part.keys.get(SIGNATURE)
        if signature is not None:
            raise NativeFormatError("thought signatures come only in the model's contents", field=sig_at,
                                    code="thought_signature_in_user_content")  # fmt: skip
        if kind == "functionCall":
            raise NativeFormatError("a functionCall belongs in a model content", field=f"{at}.{part.used_key}",
                                    code="function_call_in_user_content")  # fmt: skip
        if kind == "functionResponse":
            call_id, block, is_error = _function_response(part, at, ordinals)
            if any(t[0] == call_id for t in tools):
                raise NativeFormatError(f"function response id {call_id!r} appears twice in this content",
                                        field=f"{at}.{part.used_key}",
                                        code="duplicate_function_response_id")  # fmt: skip
            named_by = "id" if block.item_id is not None else "name"  # Gemini pairs by id, else by name
            tools.append((call_id, block, is_error, f"{at}.{part.used_key}.{named_by}"))
            continue
        block_ = _data_part(part, kind, at)
        if isinstance(block_, ReasoningBlock):
            raise NativeFormatError("thought parts come only in the model's contents", field=f"{at}.thought",
                                    code="thought_in_user_content")  # fmt: skip
        blocks.append(block_)
    out = []
    for call_id, block, is_error, path in tools:
        out.append(native_message(message_id=new_id(), role="tool", blocks=(block,), api="gemini", provider="google",
                                  tool_call_id=call_id, is_error=is_error))  # fmt: skip
        paths[out[-1].message_id] = path
    if blocks:
        out.append(native_message(message_id=new_id(), role="user", blocks=tuple(blocks), api="gemini",
                                  provider="google"))  # fmt: skip
    return out


class _Part:
    def __init__(self, keys: _Keys, used_key: str) -> None:
        self.keys = keys
        self.used_key = used_key  # the data key as spelled in the payload


def _part_kind(raw: Any, at: str) -> tuple[_Part, str]:
    """The part and its data kind (a camelCase name of :data:`MODELLED_DATA`, or "opaque")."""
    if not isinstance(raw, Mapping):
        raise NativeFormatError("must be a Part object", field=at, code="invalid_part")
    keys = _Keys(raw, at)
    found: list[tuple[str, str]] = []
    for camel in MODELLED_DATA:
        path, value = keys.get(camel)
        if value is not None:
            found.append((camel, path.rsplit(".", 1)[1]))
    found += [(camel, key) for camel, snake in OPAQUE_DATA.items() for key in (camel, snake)
              if raw.get(key) is not None]  # fmt: skip
    if len(found) > 1:
        raise NativeFormatError(f"a part holds one kind of data, this one has {', '.join(k for _, k in found)}",
                                field=f"{at}.{found[1][1]}", code="multiple_part_data")  # fmt: skip
    thought_at, thought = f"{at}.thought", raw.get("thought")
    if thought is not None and not isinstance(thought, bool):
        raise NativeFormatError("must be true or false", field=thought_at, code="invalid_thought")
    sig_at, signature = keys.get(SIGNATURE)
    if signature is not None and not is_base64(signature):
        raise NativeFormatError("must be a base64 string", field=sig_at, code="invalid_thought_signature")
    if not found:  # Gemini refuses a part without data: only keys of no kind it knows
        raise NativeFormatError(f"a part needs its data, one of {', '.join(DATA_KEYS)}",
                                field=at, code="empty_part")  # fmt: skip
    camel, used = found[0]
    check_fields(raw, GEMINI_PART, at, "invalid_part")
    if camel in GEMINI_DATA:
        if not isinstance(raw[used], Mapping):
            raise NativeFormatError("must be an object", field=f"{at}.{used}", code="invalid_part")
        check_fields(raw[used], GEMINI_DATA[camel], f"{at}.{used}", "invalid_part")
    if camel in OPAQUE_DATA or (thought and camel != "text"):  # or a thought image (Gemini image models)
        return _Part(keys, used), "opaque"
    return _Part(keys, used), camel


def _extra(part: _Part, modelled: set[str], inner: Mapping[str, Any] | None = None, **marks: str) -> str | None:
    """The part's unmodelled keys (and its data object's, under the data key) as compact JSON."""
    doc: dict[str, Any] = {k: v for k, v in part.keys.obj.items() if k not in modelled}
    if inner:
        doc[part.used_key] = dict(inner)
    if part.keys.snake:
        doc[KEYS_MARK] = "snake_case"
    doc.update(marks)
    return compact_json(doc) if doc else None


def _data_part(part: _Part, kind: str, at: str) -> Block:
    raw = part.keys.obj
    if kind == "opaque":
        return OpaqueBlock(provider="gemini", json=compact_json(raw))
    sig_key = SNAKE[SIGNATURE] if SNAKE[SIGNATURE] in raw else SIGNATURE
    if kind == "text":
        text = raw["text"]
        if not isinstance(text, str):
            raise NativeFormatError("must be a string", field=f"{at}.text", code="invalid_text")
        if raw.get("thought") is True:
            return ReasoningBlock(text=text, signature=raw.get(sig_key),
                                  extra=_extra(part, {"text", "thought", sig_key}))  # fmt: skip
        return TextBlock(text, extra=_extra(part, {"text"}))
    obj = raw[part.used_key]
    inner_at = f"{at}.{part.used_key}"
    if not isinstance(obj, Mapping):
        raise NativeFormatError("must be an object", field=inner_at, code=f"invalid_{SNAKE[kind]}")
    inner = _Keys(obj, inner_at)
    mime_at, mime = inner.get("mimeType")
    name_at, name = inner.get("displayName")
    source_key = "data" if kind == "inlineData" else "fileUri"
    source_at, source = inner.get(source_key)
    for f, v, required in ((mime_at, mime, kind == "inlineData"), (name_at, name, False), (source_at, source, True)):
        if (v is None and required) or (v is not None and not isinstance(v, str)):
            raise NativeFormatError("must be a string", field=f, code=f"invalid_{SNAKE[kind]}")
    if kind == "inlineData" and not is_base64(source):
        raise NativeFormatError("must be base64", field=source_at, code="invalid_inline_data")
    part.keys.snake = part.keys.snake or inner.snake
    media: Literal["image", "file"] = "image" if isinstance(mime, str) and mime.startswith("image/") else "file"
    extra = _extra(part, {part.used_key}, inner.leftover())
    if kind == "inlineData":
        return MediaBlock(media, data=source, media_type=mime, filename=name, extra=extra)
    return MediaBlock(media, url=source, media_type=mime, filename=name, extra=extra)


def _function_call(part: _Part, at: str, ordinals: dict[str, int]) -> ToolCallBlock:
    raw = part.keys.obj
    call_at = f"{at}.{part.used_key}"
    call = raw[part.used_key]
    if not isinstance(call, Mapping):
        raise NativeFormatError("must be an object", field=call_at, code="invalid_function_call")
    name, native_id = _name_and_id(call, call_at, "invalid_function_call_id")
    inner = _Keys(call, call_at)
    inner.used.update({"name", "id", "args"})
    marks: dict[str, str] = {}
    if "args" not in call or call["args"] is None:
        arguments = "{}"
        marks[NO_ARGS_MARK] = "absent"
    elif isinstance(call["args"], Mapping):
        arguments = compact_json(call["args"])
    else:
        raise NativeFormatError("must be an object", field=f"{call_at}.args", code="invalid_function_args")
    k = ordinals.get(name, 0)
    ordinals[name] = k + 1
    sig_key = SNAKE[SIGNATURE] if SNAKE[SIGNATURE] in raw else SIGNATURE
    return ToolCallBlock(
        id=native_id if native_id is not None else f"{name}:{k}", name=name, arguments=arguments,
        item_id=native_id, signature=raw.get(sig_key),
        extra=_extra(part, {part.used_key, sig_key}, inner.leftover(), **marks),
    )  # fmt: skip


def _function_response(part: _Part, at: str, ordinals: dict[str, int]) -> tuple[str, TextBlock, bool | None]:
    raw = part.keys.obj
    resp_at = f"{at}.{part.used_key}"
    resp = raw[part.used_key]
    if not isinstance(resp, Mapping):
        raise NativeFormatError("must be an object", field=resp_at, code="invalid_function_response")
    name, native_id = _name_and_id(resp, resp_at, "invalid_function_response_id")
    body = resp.get("response")
    if not isinstance(body, Mapping):
        raise NativeFormatError("must be an object (Gemini's response is a JSON object)", field=f"{resp_at}.response",
                                code="function_response_not_object")  # fmt: skip
    k = ordinals.get(name, 0)
    ordinals[name] = k + 1
    inner = {key: v for key, v in resp.items() if key not in {"response", "id"}}  # keeps name
    text = TextBlock(compact_json(body), extra=_extra(part, {part.used_key}, inner, **{RESPONSE_MARK: "object"}))
    if native_id is not None:
        text = TextBlock(text.text, item_id=native_id, extra=text.extra)
    is_error = True if set(body) == {"error"} else None
    return (native_id if native_id is not None else f"{name}:{k}"), text, is_error


def _name_and_id(obj: Mapping[str, Any], at: str, id_code: str) -> tuple[str, str | None]:
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise NativeFormatError("needs the function's name", field=f"{at}.name", code="missing_function_name")
    native_id = obj.get("id")
    if native_id is not None and (not isinstance(native_id, str) or not native_id):
        raise NativeFormatError("must be a non-empty string", field=f"{at}.id", code=id_code)
    return name, native_id
