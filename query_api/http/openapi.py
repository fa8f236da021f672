"""The OpenAPI schema as the API really answers: the bearer scheme on every route that needs a
token, convlog's error shape (``{"error": {"code", "message", ...}}``) instead of FastAPI's
``{"detail": ...}``, and the context's body for each format.

The routes return plain JSON (``FastJSONResponse``, no response validation on the hot path), so
FastAPI cannot see their shape; the models here describe it for the schema only. Tests validate
the schema (openapi-spec-validator) and real answers against it.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["install_openapi"]

JSON_OBJECT = dict[str, Any]
BEARER = "bearer"
CONTEXT_PATH = "/v1/users/{user_id}/conversations/{conversation_id}/context"


class ErrorDetail(BaseModel):
    """What went wrong: a stable ``code`` to branch on, a message for people, and the input at fault."""

    model_config = ConfigDict(extra="allow", title="ErrorDetail")
    code: str = Field(description="stable, snake_case: invalid_event, not_caught_up, unauthorized, ...")
    message: str
    field: str | None = Field(None, description="the JSON path or parameter at fault, for invalid input")


class ErrorBody(BaseModel):
    """Every error answer; some codes add fields beside ``code`` (``needed``/``available``, coordinates)."""

    model_config = ConfigDict(title="Error")
    error: ErrorDetail


class Position(BaseModel):
    partition: int
    offset: int = Field(description="the conversation's last event the read models reflect")


class SummaryRef(BaseModel):
    summary_id: str
    text: str
    covers_through_seq: int


class DroppedItem(BaseModel):
    """Something left out on the way to this format or model (a reasoning blob bound to another
    provider, an unanswered call), so nothing disappears silently."""

    message_id: str
    what: str
    reason: str


class EditItem(BaseModel):
    """What one kind of context editing changed (docs/http-api.md, "Context editing")."""

    kind: Literal["clear_thinking", "clear_tool_results"]
    cleared_tokens: int = Field(description="the tokens the edit saved, in the context's encoding")
    messages: list[str] = Field(description="the ids of the messages it changed, in order")


class _Accounting(BaseModel):
    token_count: int = Field(description="the prompt tokens of the fragment, counted or estimated for the model")
    encoding: str
    encoding_estimated: bool
    summary: SummaryRef | None
    dropped_turns: int
    dropped: list[DroppedItem]
    edits: list[EditItem] = Field(description="what context editing changed (empty: nothing)")
    compressed: bool
    degraded: bool = Field(description="true when a record of the conversation is parked as a dead letter")
    position: Position
    counted_at_read: bool | None = None
    estimate: JSON_OBJECT | None = Field(None, description="how an estimated count was calibrated")


class ChatCompletionsContext(_Accounting):
    model_config = ConfigDict(title="ChatCompletionsContext")
    format: Literal["chat_completions"]
    messages: list[JSON_OBJECT] = Field(description="Chat Completions `messages`")
    prompt_cache_key: str


class AnthropicContext(_Accounting):
    model_config = ConfigDict(title="AnthropicContext")
    format: Literal["anthropic"]
    system: list[JSON_OBJECT] | str | None = Field(None, description="Messages API `system`, when there is one")
    messages: list[JSON_OBJECT] = Field(description="Messages API `messages`")


class ResponsesContext(_Accounting):
    model_config = ConfigDict(title="ResponsesContext")
    format: Literal["responses"]
    instructions: str | None = Field(None, description="Responses API `instructions`, when there are some")
    input: list[JSON_OBJECT] = Field(description="Responses API `input` items")
    prompt_cache_key: str


class GeminiContext(_Accounting):
    model_config = ConfigDict(title="GeminiContext")
    format: Literal["gemini"]
    system_instruction: JSON_OBJECT | None = Field(None, description="generateContent `system_instruction`")
    contents: list[JSON_OBJECT] = Field(description="generateContent `contents`")


CONTEXTS: dict[str, type[BaseModel]] = {
    "chat_completions": ChatCompletionsContext,
    "anthropic": AnthropicContext,
    "responses": ResponsesContext,
    "gemini": GeminiContext,
}

_ERRORS = {
    "401": "no valid `Authorization: Bearer` token (`unauthorized`); checked before anything else",
    "403": "the token's role may not do what the route does (`forbidden_role`, with `role` and `needs`); checked next",
    "422": "invalid input, naming the `field` (invalid_json, invalid_event, invalid_request, ...)",
    "503": "retriable: the log or Postgres unreachable, the projection not caught up (`Retry-After`)",
}

_BODY_ERRORS = {
    "408": "the body did not arrive within CONVLOG_HTTP_BODY_TIMEOUT_S of the request's head (`body_timeout`)",
    "413": "the body is over the limit (`payload_too_large`, `event_too_large`)",
    "415": "a body of another type than JSON (`unsupported_media_type`); a body without a Content-Type, or "
    "sent as application/x-www-form-urlencoded (curl's `-d`), is read as JSON",
}


def install_openapi(app: FastAPI, *, public: frozenset[str]) -> None:
    """Serve the schema described above at ``app.openapi_url`` (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _schema(app, public)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign] # FastAPI's documented way to extend the schema


def _schema(app: FastAPI, public: frozenset[str]) -> dict[str, Any]:
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {})
    schemas: dict[str, Any] = components.setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's, never answered here
        schemas.pop(name, None)
    refs = {name: _add_model(schemas, model) for name, model in CONTEXTS.items()}
    error = {"content": {"application/json": {"schema": _add_model(schemas, ErrorBody)}}}
    components["securitySchemes"] = {
        BEARER: {
            "type": "http",
            "scheme": "bearer",
            "description": "an API token (CONVLOG_API_TOKENS, or a token file): its tenant and role",
        }
    }
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            if path in public:
                responses.pop("422", None)
                continue
            operation["security"] = [{BEARER: []}]
            for status, description in _ERRORS.items():
                responses[status] = {"description": description, **error}
            if "requestBody" in operation:
                for status, description in _BODY_ERRORS.items():
                    responses[status] = {"description": description, **error}
    ok = schema["paths"][CONTEXT_PATH]["get"]["responses"]["200"]
    ok["description"] = "the context to send, in the `format` asked for (the provider's own keys) with its accounting"
    ok["content"] = {
        "application/json": {
            "schema": {
                "oneOf": list(refs.values()),
                "discriminator": {
                    "propertyName": "format",
                    "mapping": {name: ref["$ref"] for name, ref in refs.items()},
                },
            }
        }
    }
    return schema


def _add_model(schemas: dict[str, Any], model: type[BaseModel]) -> dict[str, str]:
    """Put ``model``'s JSON schema (and those it refers to) into ``components.schemas``; its ``$ref``."""
    body = model.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in body.pop("$defs", {}).items():
        schemas.setdefault(name, definition)
    name = str(body.get("title", model.__name__))
    schemas[name] = body
    return {"$ref": f"#/components/schemas/{name}"}
