"""What query_api/http/fastapi_compat.py relies on in FastAPI's private ``fastapi._compat``, for
the versions it declares: a route's parameter validators and FastAPI's missing-parameter error."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from query_api.http import fastapi_compat
from query_api.http.fast_params import FastParamsRoute
from tests.compat.versions import assert_within


def test_the_installed_fastapi_is_the_one_written_for() -> None:
    assert_within(fastapi_compat.DISTRIBUTION, fastapi_compat.VERSIONS)
    assert fastapi_compat.AVAILABLE


def _route() -> FastParamsRoute:
    router = APIRouter(route_class=FastParamsRoute)

    @router.get("/items/{item_id}")
    async def read(item_id: str, limit: Annotated[int, Query(ge=1)] = 10) -> JSONResponse:
        return JSONResponse([item_id, limit])

    route = router.routes[0]
    assert isinstance(route, FastParamsRoute)
    return route


def test_a_parameter_is_validated_by_the_field_fastapi_built() -> None:
    [item_id] = _route().dependant.path_params
    [limit] = _route().dependant.query_params
    assert isinstance(limit, fastapi_compat.ModelField)
    assert (limit.name, limit.default, limit.field_info.is_required()) == ("limit", 10, False)
    assert fastapi_compat.validate(item_id, "a b", ("path", "item_id")) == ("a b", [])
    assert fastapi_compat.validate(limit, "3", ("query", "limit")) == (3, [])
    value, errors = fastapi_compat.validate(limit, "0", ("query", "limit"))
    assert value is None
    assert [(e["type"], e["loc"], e["input"]) for e in errors] == [("greater_than_equal", ("query", "limit"), "0")]
    _, errors = fastapi_compat.validate(limit, "x", ("query", "limit"))
    assert [(e["type"], e["loc"]) for e in errors] == [("int_parsing", ("query", "limit"))]


def test_a_missing_parameter_is_fastapis_error() -> None:
    error = fastapi_compat.missing_error(("query", "q"))
    assert (error["type"], error["loc"], error["input"]) == ("missing", ("query", "q"), None)
    assert error["msg"] == "Field required"


def test_the_fast_path_is_taken() -> None:
    """Else an upgrade that moved the internals would quietly serve every request on FastAPI's handler."""
    assert _route().get_route_handler().__qualname__.startswith("FastParamsRoute.")
