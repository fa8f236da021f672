"""``/openapi.json`` is valid OpenAPI and says what the API really does: the bearer scheme, the
``{"error": …}`` shape of every error answer, and the context's body in each format — checked
against real answers, not only read."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import pytest
from openapi_spec_validator import validate

from query_api.http.openapi import CONTEXT_PATH
from tests.test_api_in_memory import BASE, A, deps, in_memory_client, post

__all__ = ["deps", "in_memory_client"]  # the fixtures

FORMATS = ("chat_completions", "anthropic", "responses", "gemini")


@pytest.fixture
async def spec(in_memory_client: httpx.AsyncClient) -> dict[str, Any]:
    response = await in_memory_client.get("/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


def _check(spec: dict[str, Any], schema: dict[str, Any], instance: Any) -> None:
    """Validate ``instance`` against a schema of ``spec`` (its ``#/components/...`` refs resolved)."""
    jsonschema.Draft202012Validator({**schema, "components": spec["components"]}).validate(instance)


def _error_schema(spec: dict[str, Any], path: str, method: str, status: int) -> dict[str, Any]:
    return dict(spec["paths"][path][method]["responses"][str(status)]["content"]["application/json"]["schema"])


async def test_the_schema_is_valid_openapi_with_the_bearer_scheme_on_every_private_route(
    spec: dict[str, Any],
) -> None:
    validate(spec)
    assert spec["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "an API token (CONVLOG_API_TOKENS, or a token file): its tenant and role",
    }
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            expected = None if path in ("/healthz", "/readyz", "/metrics") else [{"bearer": []}]
            assert operation.get("security") == expected, (method, path)
    assert "HTTPValidationError" not in str(spec), "FastAPI's {detail: ...} shape is never answered"


async def test_real_error_answers_have_the_documented_shape(
    in_memory_client: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    path = "/v1/users/{user_id}/conversations/{conversation_id}/messages"
    unauthorized = await in_memory_client.post(f"{BASE}/c/messages", json={"role": "user", "content": "x"})
    not_json = await in_memory_client.post(f"{BASE}/c/messages", content=b"{nope", headers=A)
    invalid = await in_memory_client.post(f"{BASE}/c/messages", json={"role": "wizard", "content": "x"}, headers=A)
    for response, status in ((unauthorized, 401), (not_json, 422), (invalid, 422)):
        assert response.status_code == status, response.text
        _check(spec, _error_schema(spec, path, "post", status), response.json())


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_real_context_of_each_format_has_the_documented_shape(
    in_memory_client: httpx.AsyncClient, spec: dict[str, Any], fmt: str
) -> None:
    await post(in_memory_client, {"role": "system", "content": "Be brief."})
    last = await post(in_memory_client, {"role": "user", "content": "Hello"})
    response = await in_memory_client.get(
        f"{BASE}/oa/context",
        params={"model": "gpt-4o", "budget_tokens": 1000, "format": fmt, "min_offset": last["offset"]},
        headers=A,
    )
    assert response.status_code == 200, response.text
    ok = spec["paths"][CONTEXT_PATH]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    _check(spec, ok, response.json())
    wrong = {**response.json(), "format": "klingon"}
    with pytest.raises(jsonschema.ValidationError):  # the schema tells the formats apart: it can fail
        _check(spec, ok, wrong)


async def test_an_edited_context_has_the_documented_edits(
    in_memory_client: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    last = None
    for i in range(3):
        await post(in_memory_client, {"role": "user", "content": f"read file {i}"})
        call = {"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        await post(in_memory_client, {"role": "assistant", "content": None, "tool_calls": [call]})
        last = await post(in_memory_client, {"role": "tool", "tool_call_id": f"c{i}", "content": "line of code " * 50})
    assert last is not None
    params = {"model": "gpt-4o", "budget_tokens": 10_000, "min_offset": last["offset"]}
    editing = {"clear_tool_results_trigger": 0, "clear_tool_results_keep": 1}
    response = await in_memory_client.get(f"{BASE}/oa/context", params=params | editing, headers=A)
    assert response.status_code == 200, response.text
    body = response.json()
    assert [e["kind"] for e in body["edits"]] == ["clear_tool_results"]
    ok = spec["paths"][CONTEXT_PATH]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    _check(spec, ok, body)
    for wrong in ({**body["edits"][0], "kind": "summarize"}, {**body["edits"][0], "messages": "t1"}):
        with pytest.raises(jsonschema.ValidationError):
            _check(spec, ok, {**body, "edits": [wrong]})
    parameters = {p["name"] for p in spec["paths"][CONTEXT_PATH]["get"]["parameters"]}
    assert {"clear_tool_results_trigger", "clear_thinking_keep_turns", "editing_defaults"} <= parameters
