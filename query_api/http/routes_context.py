"""The context a model is sent: live from the read models (optionally after ``min_offset``), or
rebuilt from the log exactly as it was served at ``as_of`` or ``before_message``. The reading is
the query service's (query_api/live/); here, its parameters and its answer's headers."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Annotated, Literal, TypeVar

from fastapi import APIRouter, Query, Request

from events.blocks import ApiFormat
from events.errors import InvalidRequestError
from projectors.tokens import model_spec
from query_api.as_of import BeforeMessage
from query_api.context_editing import MAX_KEPT, MAX_TOKENS, EditingParameterError, EditingParameters
from query_api.context_types import NO_EDITING, ContextRequest, EditingPolicy, ModelSpec, NoRoomError, ReasoningPolicy
from query_api.http.deps import PREFIX, ApiDeps, ApiError, AuthHeader, Requests
from query_api.http.disconnects import unless_disconnected
from query_api.http.fast_json import FastJSONResponse
from query_api.http.fast_params import FastParamsRoute
from query_api.live import ServedContext
from query_api.served import context_body

CACHEABLE_PREFIX_HEADER = "Convlog-Cacheable-Prefix-Tokens"
"""Leading tokens of this context equal to the previous one served for the conversation (query_api/cache_prefix.py)."""
# The read-models version a live context was served from: with ``as_of`` (or ``before_message``)
# and ``read_models_version``, an audit rebuilds it with that version's window, even where the
# log alone cannot tell (a conversation read again after a switch with no event of its own).
VERSION_HEADER = "Convlog-Read-Models-Version"
MAX_EXCLUDE_CHARS = 8192

T = TypeVar("T")


def context_routes(deps: ApiDeps) -> APIRouter:
    # The hot route: its parameters validated without FastAPI's per-request introspection.
    router = APIRouter(route_class=FastParamsRoute)
    requests = Requests(deps)
    queries = deps.queries

    @router.get(PREFIX + "/{conversation_id}/context")
    async def context(
        http_request: Request,
        user_id: str,
        conversation_id: str,
        model: Annotated[str, Query(min_length=1, max_length=200)],
        budget_tokens: Annotated[int, Query(gt=0, le=10_000_000)],
        reserve_tokens: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
        tools_tokens: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
        reasoning: ReasoningPolicy = "omit",
        format: ApiFormat = "chat_completions",  # noqa: A002 -- the query parameter's public name
        cache: bool = False,  # noqa: FBT001, FBT002 -- a query parameter, passed by name by FastAPI
        min_offset: Annotated[int | None, Query(ge=0)] = None,
        as_of: Annotated[int | None, Query(ge=0)] = None,
        before_message: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
        read_models_version: Annotated[int | None, Query(ge=1)] = None,
        clear_tool_results_trigger: Annotated[int | None, Query(ge=0, le=MAX_TOKENS)] = None,
        clear_tool_results_keep: Annotated[int | None, Query(ge=0, le=MAX_KEPT)] = None,
        clear_tool_results_at_least: Annotated[int | None, Query(ge=0, le=MAX_TOKENS)] = None,
        clear_tool_results_exclude: Annotated[str | None, Query(max_length=MAX_EXCLUDE_CHARS)] = None,
        clear_thinking_keep_turns: Annotated[int | None, Query(ge=1, le=MAX_KEPT)] = None,
        clear_thinking_at_least: Annotated[int | None, Query(ge=0, le=MAX_TOKENS)] = None,
        editing_defaults: Literal["apply", "ignore"] = "apply",
        authorization: AuthHeader = None,
    ) -> FastJSONResponse:
        key = requests.key_of(authorization, user_id, conversation_id)
        spec = _model_spec(model, queries.default_encoding)
        editing = _editing(
            queries.editing if editing_defaults == "apply" else NO_EDITING,
            EditingParameters(
                clear_tool_results_trigger,
                clear_tool_results_keep,
                clear_tool_results_at_least,
                clear_tool_results_exclude,
                clear_thinking_keep_turns,
                clear_thinking_at_least,
            ),
        )
        await queries.reads()  # looked up first, as ever: without a live version, that is the answer
        request = ContextRequest(
            model,
            budget_tokens,
            reserve_tokens,
            tools_tokens,
            reasoning,
            queries.image_turns,
            format=format,
            cache=cache,
            editing=editing,
        )
        _refuse_no_room(request)
        if _is_live(as_of, before_message, read_models_version):
            served = await queries.live_context(key, spec, request, min_offset)
        else:  # rebuilt from the log, exactly as served then

            def guard(work: Awaitable[T]) -> Awaitable[T]:
                return unless_disconnected(http_request, work)

            point = as_of if as_of is not None else BeforeMessage(before_message or "")
            served = await queries.context_then(key, spec, request, point, version=read_models_version, guard=guard)
        return _response(served, spec, queries.counted_encodings)

    return router


def _model_spec(model: str, default_encoding: str) -> ModelSpec:
    try:
        return model_spec(model, default_encoding=default_encoding)
    except InvalidRequestError as e:
        raise ApiError(422, "invalid_request", str(e), field="model") from e


def _response(served: ServedContext, spec: ModelSpec, counted: tuple[str, ...]) -> FastJSONResponse:
    # Plain JSON types already: skip FastAPI's encoder and response validation on the hot path.
    response = FastJSONResponse(context_body(served.context, served.inputs, spec, counted=counted))
    # Headers, so that the body stays what as_of rebuilds byte for byte; a context rebuilt for
    # an audit is not one a model was sent again (it has neither).
    if served.version is not None:
        response.headers[VERSION_HEADER] = str(served.version)
    if served.cacheable_prefix is not None:
        response.headers[CACHEABLE_PREFIX_HEADER] = str(served.cacheable_prefix)
    return response


def _editing(default: EditingPolicy, given: EditingParameters) -> EditingPolicy:
    try:
        return given.policy(default)
    except EditingParameterError as e:
        raise ApiError(422, e.code, str(e), field=e.field) from e


def _is_live(as_of: int | None, before_message: str | None, read_models_version: int | None) -> bool:
    """Whether the request is for the live context (not one rebuilt as served then); the
    parameters that cannot go together refused."""
    if as_of is not None and before_message is not None:
        raise ApiError(422, "invalid_request", "give as_of or before_message, not both", field="before_message")
    live = as_of is None and before_message is None
    if live and read_models_version is not None:
        raise ApiError(
            422, "invalid_request", "read_models_version goes with as_of or before_message", field="read_models_version"
        )
    return live


def _refuse_no_room(request: ContextRequest) -> None:
    try:
        request.refuse_no_room()
    except NoRoomError as e:
        raise ApiError(422, e.code, str(e), field="reserve_tokens") from e
