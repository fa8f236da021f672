"""The context route's parameters, validated by FastParamsRoute: the same values and the same
validation errors (all of them, in order) as FastAPI's own handler gives for the same signature."""

from __future__ import annotations

from typing import Annotated, Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel

from events.blocks import ApiFormat
from query_api.context_types import ReasoningPolicy
from query_api.http.deps import AuthHeader
from query_api.http.fast_params import FastParamsRoute

PATH = "/v1/users/{user_id}/conversations/{conversation_id}/context"


def app_with(route_class: type[APIRoute]) -> FastAPI:
    """An app with the context route's signature, answering with the values it was given."""
    app = FastAPI()
    app.include_router(router_with(route_class))
    return app


def router_with(route_class: type[APIRoute]) -> APIRouter:
    router = APIRouter(route_class=route_class)

    @router.get(PATH)
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
        cache: bool = False,
        min_offset: Annotated[int | None, Query(ge=0)] = None,
        as_of: Annotated[int | None, Query(ge=0)] = None,
        before_message: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
        authorization: AuthHeader = None,
    ) -> JSONResponse:
        values = dict(locals())
        values.pop("http_request")
        assert isinstance(http_request, Request)
        return JSONResponse({k: [type(v).__name__, v] for k, v in values.items()})

    return router


QUERIES = [
    "model=gpt-4o&budget_tokens=8000",
    "model=gpt-4o&budget_tokens=8000&reserve_tokens=10&tools_tokens=5&reasoning=all&format=gemini&cache=true"
    "&min_offset=0&as_of=7&before_message=m1",
    "model=a&model=b&budget_tokens=1&budget_tokens=2",  # repeated: the last one, as Starlette's get gives
    "model=gpt-4o&budget_tokens=8000&cache=yes",
    "model=gpt-4o&budget_tokens=8000&cache=0",
    "model=gpt-4o&budget_tokens=%2B8000",
    "model=gpt-4o&budget_tokens=8000&unknown=1",
    "",  # two missing
    "model=&budget_tokens=0",
    "model=gpt-4o&budget_tokens=x",
    "model=gpt-4o&budget_tokens=8000.5",
    "model=gpt-4o&budget_tokens=10000001",
    "model=gpt-4o&budget_tokens=8000&min_offset=",
    "model=gpt-4o&budget_tokens=8000&min_offset=-1&as_of=-2",
    "model=gpt-4o&budget_tokens=8000&reasoning=some&format=xml&cache=maybe",
    "model=" + "m" * 201 + "&budget_tokens=8000&before_message=",
    "model=gpt-4o&budget_tokens=8000&before_message=" + "b" * 129,
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer t"}])
async def test_the_fast_route_answers_as_fastapis_own_handler(query: str, headers: dict[str, str]) -> None:
    answers = []
    for route_class in (APIRoute, FastParamsRoute):
        transport = httpx.ASGITransport(app=app_with(route_class))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            r = await client.get(f"/v1/users/u%201/conversations/c/context?{query}", headers=headers)
        answers.append((r.status_code, r.json()))
    assert answers[0] == answers[1]


def test_the_context_route_takes_the_fast_path_and_others_fastapis() -> None:
    class Body(BaseModel):
        text: str

    router = APIRouter(route_class=FastParamsRoute)

    @router.post("/with-body")
    async def with_body(body: Body) -> JSONResponse:
        return JSONResponse(body.text)

    context_route = router_with(FastParamsRoute).routes[0]
    body_route = router.routes[0]
    assert isinstance(context_route, FastParamsRoute)
    assert isinstance(body_route, FastParamsRoute)
    assert context_route.get_route_handler().__qualname__.startswith("FastParamsRoute.")
    assert not body_route.get_route_handler().__qualname__.startswith("FastParamsRoute.")


def test_the_schema_documents_the_same_parameters() -> None:
    def parameters(app: FastAPI) -> Any:
        return app.openapi()["paths"][PATH]["get"]["parameters"]

    assert parameters(app_with(FastParamsRoute)) == parameters(app_with(APIRoute))
