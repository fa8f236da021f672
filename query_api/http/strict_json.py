"""Request bodies read strictly (events/strict_json.py): every route's class.

A body is JSON whatever its ``Content-Type`` says when it says nothing or what curl's ``-d``
sends (``application/x-www-form-urlencoded``); another non-JSON type is 415
``unsupported_media_type``, naming the header to send.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from events.errors import ConvlogError
from events.strict_json import NotJsonError, parse_json
from query_api.http.deps import error_response
from query_api.http.roles import role_checked


class _BodyNotJsonError(StarletteHTTPException, ConvlogError):
    """Raised while the body is parsed; an HTTPException (first, for Starlette's handler
    lookup) so FastAPI passes it on (it turns any other exception there into a bare 400)."""

    code = "invalid_json"

    def __init__(self, reason: str) -> None:
        super().__init__(422, reason)


class _StrictJsonRequest(Request):
    """A request whose JSON body is read strictly: no NaN or Infinity, and invalid UTF-8, deep
    nesting or huge integers are a 422 like any malformed JSON. The parsed body is kept in an
    attribute of its own, not Starlette's private ``_json`` cache: FastAPI calls :meth:`json`
    (its documented hook for a custom Request class), and nothing reads the cache but Starlette's
    own ``json``, which this one replaces."""

    _parsed_json: Any

    async def json(self) -> Any:
        if not hasattr(self, "_parsed_json"):
            body = await self.body()
            try:
                self._parsed_json = parse_json(body)
            except NotJsonError as e:
                raise _BodyNotJsonError(str(e)) from e
        return self._parsed_json


# Read as JSON: no type, and curl's default for `-d` (a newcomer's first request). Neither can
# be sent cross-site with the Authorization header a request needs without a CORS preflight.
_READ_AS_JSON = frozenset({"", "application/x-www-form-urlencoded"})


def _content_type_refused(request: Request) -> Response | None:
    """None when the body is (or is read as) JSON; else a 415 saying what to send."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        return None
    if media in _READ_AS_JSON:
        headers = [(k, v) for k, v in request.scope["headers"] if k != b"content-type"]
        request.scope["headers"] = [*headers, (b"content-type", b"application/json")]
        return None
    if request.headers.get("content-length", "0") == "0" and "transfer-encoding" not in request.headers:
        return None  # no body: nothing to read in the wrong type
    return error_response(
        415,
        "unsupported_media_type",
        f"the body must be JSON: send it with Content-Type: application/json (not {media})",
        field="Content-Type",
    )


class StrictJsonRoute(APIRoute):
    """FastAPI's documented hook for a custom Request class: every route reads JSON strictly,
    once its caller's role was checked (query_api/http/roles.py)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes_body = self.body_field is not None

        async def strict(request: Request) -> Response:
            if takes_body and (refused := _content_type_refused(request)) is not None:
                return refused
            try:
                return await handler(_StrictJsonRequest(request.scope, request.receive))
            except _BodyNotJsonError as e:
                return error_response(422, "invalid_json", f"the body is not JSON: {e.detail}", field="body")

        return role_checked(self, strict)
