r"""Gemini ``Part``\ s to blocks (the parser's, events/formats/gemini/parse.py): which kind of data
a part holds, its modelled keys checked, the rest kept in the block's ``extra`` with the marks
that render it back as it came."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from events.blocks import Block, MediaBlock, OpaqueBlock, ReasoningBlock, TextBlock, ToolCallBlock
from events.errors import NativeFormatError
from events.formats.gemini.keys import (
    DATA_KEYS,
    KEYS_MARK,
    MODELLED_DATA,
    NO_ARGS_MARK,
    OPAQUE_DATA,
    RESPONSE_MARK,
    SIGNATURE,
    SNAKE,
    Keys,
    is_base64,
)
from events.formats.gemini.schema import GEMINI_DATA, GEMINI_PART
from events.formats.schema import check_fields
from events.strict_json import compact_json

__all__ = ["data_part", "function_call", "function_response", "part_kind"]


class _Part:
    def __init__(self, keys: Keys, used_key: str) -> None:
        self.keys = keys
        self.used_key = used_key  # the data key as spelled in the payload


def part_kind(raw: Any, at: str) -> tuple[_Part, str]:
    """The part and its data kind (a camelCase name of :data:`MODELLED_DATA`, or "opaque")."""
    if not isinstance(raw, Mapping):
        raise NativeFormatError("must be a Part object", field=at, code="invalid_part")
    keys = Keys(raw, at)
    found: list[tuple[str, str]] = []
    for camel in MODELLED_DATA:
        path, value = keys.get(camel)
        if value is not None:
            found.append((camel, path.rsplit(".", 1)[1]))
    found += [
        (camel, key) for camel, snake in OPAQUE_DATA.items() for key in (camel, snake) if raw.get(key) is not None
    ]
    if len(found) > 1:
        raise NativeFormatError(
            f"a part holds one kind of data, this one has {', '.join(k for _, k in found)}",
            field=f"{at}.{found[1][1]}",
            code="multiple_part_data",
        )
    thought_at, thought = f"{at}.thought", raw.get("thought")
    if thought is not None and not isinstance(thought, bool):
        raise NativeFormatError("must be true or false", field=thought_at, code="invalid_thought")
    sig_at, signature = keys.get(SIGNATURE)
    if signature is not None and not is_base64(signature):
        raise NativeFormatError("must be a base64 string", field=sig_at, code="invalid_thought_signature")
    if not found:  # Gemini refuses a part without data: only keys of no kind it knows
        raise NativeFormatError(f"a part needs its data, one of {', '.join(DATA_KEYS)}", field=at, code="empty_part")
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


def data_part(part: _Part, kind: str, at: str) -> Block:
    raw = part.keys.obj
    if kind == "opaque":
        return OpaqueBlock(provider="gemini", json=compact_json(raw))
    sig_key = SNAKE[SIGNATURE] if SNAKE[SIGNATURE] in raw else SIGNATURE
    if kind == "text":
        text = raw["text"]
        if not isinstance(text, str):
            raise NativeFormatError("must be a string", field=f"{at}.text", code="invalid_text")
        if raw.get("thought") is True:
            return ReasoningBlock(
                text=text, signature=raw.get(sig_key), extra=_extra(part, {"text", "thought", sig_key})
            )
        return TextBlock(text, extra=_extra(part, {"text"}))
    obj = raw[part.used_key]
    inner_at = f"{at}.{part.used_key}"
    if not isinstance(obj, Mapping):
        raise NativeFormatError("must be an object", field=inner_at, code=f"invalid_{SNAKE[kind]}")
    inner = Keys(obj, inner_at)
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


def function_call(part: _Part, at: str, ordinals: dict[str, int]) -> ToolCallBlock:
    raw = part.keys.obj
    call_at = f"{at}.{part.used_key}"
    call = raw[part.used_key]
    if not isinstance(call, Mapping):
        raise NativeFormatError("must be an object", field=call_at, code="invalid_function_call")
    name, native_id = _name_and_id(call, call_at, "invalid_function_call_id")
    inner = Keys(call, call_at)
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
        id=native_id if native_id is not None else f"{name}:{k}",
        name=name,
        arguments=arguments,
        item_id=native_id,
        signature=raw.get(sig_key),
        extra=_extra(part, {part.used_key, sig_key}, inner.leftover(), **marks),
    )


def function_response(part: _Part, at: str, ordinals: dict[str, int]) -> tuple[str, TextBlock, bool | None]:
    raw = part.keys.obj
    resp_at = f"{at}.{part.used_key}"
    resp = raw[part.used_key]
    if not isinstance(resp, Mapping):
        raise NativeFormatError("must be an object", field=resp_at, code="invalid_function_response")
    name, native_id = _name_and_id(resp, resp_at, "invalid_function_response_id")
    body = resp.get("response")
    if not isinstance(body, Mapping):
        raise NativeFormatError(
            "must be an object (Gemini's response is a JSON object)",
            field=f"{resp_at}.response",
            code="function_response_not_object",
        )
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
