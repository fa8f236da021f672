"""The hot routes' orjson responses are the bytes Starlette's JSONResponse gives, and what
orjson refuses is still answered."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

from query_api.http.fast_json import FastJSONResponse


def test_the_same_bytes_as_the_standard_encoder() -> None:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": '加班申请 — "quoted" \\ \n\t\x00\x1f\x7f\u2028 😀'}],
        "more": [{"n": None, "ok": True}],
        "token_count": 123,
        "ratio": 0.1,
        "nested": {"empty": [], "e": {}},
        "neg": -7,
    }
    assert FastJSONResponse(body).body == JSONResponse(body).body


def test_an_integer_beyond_64_bits_is_still_encoded() -> None:
    body = {"tool_arguments": {"id": 2**70}, "keys": {1: "int key"}}
    assert (
        FastJSONResponse(body).body
        == JSONResponse(body).body
        == b'{"tool_arguments":{"id":1180591620717411303424},"keys":{"1":"int key"}}'
    )
