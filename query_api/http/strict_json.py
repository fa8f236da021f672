"""Request bodies read strictly (events/strict_json.py): every route's class."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from events.errors import ConvlogError
from events.strict_json import NotJsonError, parse_json
from query_api.http.deps import error_response


class _BodyNotJsonError(StarletteHTTPException, ConvlogError):
    """Raised while the body is parsed; an HTTPException (first, for Starlette's handler
    lookup) so FastAPI passes it on (it turns any other exception there into a bare 400)."""

    code = "invalid_json"

    def __init__(self, reason: str) -> None:
        super().__init__(422, reason)


class _StrictJsonRequest(Request):
    """A request whose JSON body is read strictly: no NaN or Infinity, and invalid UTF-8, deep
    nesting or huge integers are a 422 like any malformed JSON."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = parse_json(body)
            except NotJsonError as e:
                raise _BodyNotJsonError(str(e)) from e
        return self._json


class StrictJsonRoute(APIRoute):
    """FastAPI's documented hook for a custom Request class: every route reads JSON strictly."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            try:
                return await handler(_StrictJsonRequest(request.scope, request.receive))
            except _BodyNotJsonError as e:
                return error_response(422, "invalid_json", f"the body is not JSON: {e.detail}", field="body")

        return strict
