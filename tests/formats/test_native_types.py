"""Every native parser checks the type of every key it knows (events/formats/schema.py): a value
the provider would refuse is never stored and served back to it, and the refusal names the
exact JSON path. Unknown keys stay opaque."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from events.errors import NativeFormatError
from events.formats.registry import FORMATS

_MESSAGE = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 3, "output_tokens": 1},
}
_RESPONSE = {
    "object": "response",
    "id": "resp_1",
    "model": "gpt-5",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 3, "output_tokens": 1},
}
_REASONING = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}]}
_CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1"}
_CANDIDATE = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}}],
    "usageMetadata": {"promptTokenCount": 3},
}


def _image(source: object) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "image", "source": source}]}


def _with(doc: dict[str, Any], **changes: object) -> dict[str, Any]:
    return {**doc, **changes}


def _ids() -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"m{next(counter)}"


_B64 = {"type": "base64", "media_type": "image/png", "data": "aGk="}

REFUSED = [
    # an Anthropic image's source (served back as {"type": "image", "source": 5} before)
    ("anthropic", _image(5), "content[0].source"),
    ("anthropic", _image(None), "content[0].source"),
    ("anthropic", _image({**_B64, "data": 5}), "content[0].source.data"),
    ("anthropic", _image({**_B64, "media_type": None}), "content[0].source.media_type"),
    ("anthropic", _image({"type": 5}), "content[0].source.type"),
    ("anthropic", _image({"type": "url", "url": None}), "content[0].source.url"),
    ("anthropic", _with(_MESSAGE, usage="x"), "usage"),
    ("anthropic", _with(_MESSAGE, usage={"input_tokens": "3"}), "usage.input_tokens"),
    ("anthropic", _with(_MESSAGE, usage={"input_tokens": -3}), "usage.input_tokens"),
    ("anthropic", _with(_MESSAGE, usage={"output_tokens": True}), "usage.output_tokens"),
    ("anthropic", _with(_MESSAGE, stop_reason=5), "stop_reason"),
    ("anthropic", _with(_MESSAGE, stop_sequence=[]), "stop_sequence"),
    ("anthropic", _with(_MESSAGE, content=[{"type": "text", "text": "x", "citations": 5}]), "content[0].citations"),
    (
        "anthropic",
        {"role": "assistant", "content": [{"type": "future_block", "signature": "s"}]},
        "content[0].signature",
    ),  # kept opaque, it broke the anthropic rules (a signature on a non-thinking block)
    (
        "anthropic",
        [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": "y"}]}],
        "[0].content[0].cache_control",
    ),
    # the Responses items
    ("responses", {"type": None, "role": "user", "content": "hi"}, "type"),
    ("responses", {"type": 5, "role": "user", "content": "hi"}, "type"),
    ("responses", [{"role": "user", "content": "q"}, _with(_CALL, id=5)], "[1].id"),
    ("responses", _with(_REASONING, summary=[5]), "summary[0]"),
    ("responses", _with(_REASONING, summary=[{"type": "summary_text", "text": 5}]), "summary[0].text"),
    ("responses", _with(_REASONING, encrypted_content=5), "encrypted_content"),
    ("responses", _with(_REASONING, encrypted_content={}), "encrypted_content"),
    ("responses", _with(_REASONING, encrypted_content=[]), "encrypted_content"),
    ("responses", _with(_REASONING, content=[{"type": "reasoning_text", "text": 5}]), "content[0].text"),
    ("responses", {"role": "user", "content": [{"type": "input_image", "image_url": 5}]}, "content[0].image_url"),
    ("responses", {"role": "user", "content": [{"type": 5, "text": "x"}]}, "content[0].type"),
    (
        "responses",
        {"role": "assistant", "content": [{"type": "output_text", "text": "x", "annotations": 5}]},
        "content[0].annotations",
    ),
    ("responses", _with(_RESPONSE, model=5), "model"),
    ("responses", _with(_RESPONSE, id=5), "id"),
    ("responses", _with(_RESPONSE, status=5), "status"),
    ("responses", _with(_RESPONSE, usage={"input_tokens_details": 5}), "usage.input_tokens_details"),
    # the Gemini counts it does not read are counts too
    ("gemini", _with(_CANDIDATE, usageMetadata={"totalTokenCount": "3"}), "usageMetadata.totalTokenCount"),
    # a part whose data Gemini does not know (it was kept opaque, then broke every gemini context)
    ("gemini", {"role": "user", "parts": [{"text": "q"}, {"k": [1]}]}, "parts[1]"),
    ("gemini", {"role": "model", "parts": [{"executableCode": 5}]}, "parts[0].executableCode"),
    ("gemini", {"role": "model", "parts": [{"executableCode": {"code": 5}}]}, "parts[0].executableCode.code"),
    (
        "gemini",
        {"role": "model", "parts": [{"text": "x", "executable_code": {"code": "1"}}]},
        "parts[0].executable_code",
    ),
    ("gemini", {"role": "model", "parts": [{"text": "x", "videoMetadata": 5}]}, "parts[0].videoMetadata"),
]


@pytest.mark.parametrize(("fmt", "payload", "field"), REFUSED)
def test_a_known_key_of_the_wrong_type_is_refused_at_its_path(fmt: str, payload: object, field: str) -> None:
    with pytest.raises(NativeFormatError) as info:
        FORMATS.parser_for(fmt)(payload, new_id=_ids())
    assert info.value.field == field


ACCEPTED = [
    ("anthropic", _MESSAGE),
    ("anthropic", _image(_B64)),
    ("anthropic", _image({"type": "url", "url": "https://example.com/a.png"})),
    ("anthropic", _image({"type": "file", "file_id": "file_1"})),  # not modelled: opaque, as before
    ("anthropic", _with(_MESSAGE, stop_reason=None, stop_sequence=None, usage=None, future_key=5)),
    ("responses", _RESPONSE),
    ("responses", _with(_REASONING, encrypted_content=None)),  # kept in extra, rendered back as null
    ("responses", [{"role": "user", "content": "q"}, _CALL, {"type": "web_search_call", "id": 5, "x": None}]),
    ("gemini", _CANDIDATE),
]


@pytest.mark.parametrize(("fmt", "payload"), ACCEPTED)
def test_known_keys_of_their_types_and_unknown_keys_of_any_type_are_accepted(fmt: str, payload: object) -> None:
    assert FORMATS.parser_for(fmt)(payload, new_id=_ids()).messages
