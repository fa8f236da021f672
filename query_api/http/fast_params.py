"""A route class for a hot GET route whose parameters are plain: the request, path strings,
headers and scalar query parameters — the context route's.

FastAPI solves such a route's parameters with per-request introspection around each one (is it
a parameter model? its aliases; is its annotation a sequence?), ~75 us for the context route's
twelve query parameters on this machine, where validating them takes a few. This class keeps
FastAPI's work once per route — the dependant it analysed from the signature (so the OpenAPI
schema is FastAPI's, unchanged) and each parameter's own validator (a ``ModelField``, with its
TypeAdapter) — and per request only looks each value up and validates it with that validator,
as FastAPI does: the same values, the same errors in the same order (raised as the same
:class:`~fastapi.exceptions.RequestValidationError`), defaults copied as FastAPI copies them.
A route with anything else (a body, dependencies, cookies, a sequence parameter, aliases,
special parameters) gets FastAPI's own handler.

What it leaves out is FastAPI's per-request telemetry hooks (OpenTelemetry spans for the
dependency and serialization phases, recorded only when an OpenTelemetry provider is set up;
convlog sets none up), and response serialization: the endpoint must return a Response.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Coroutine
from copy import deepcopy
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError

from query_api.http import fastapi_compat
from query_api.http.fastapi_compat import ModelField
from query_api.http.roles import role_checked
from query_api.http.strict_json import StrictJsonRoute

_Handler = Callable[[Request], Coroutine[Any, Any, Response]]
_SEQUENCES = (list, tuple, set, frozenset, typing.Sequence)


class FastParamsRoute(StrictJsonRoute):
    """For a GET route of plain parameters (see the module): FastAPI's validators, without its
    per-request introspection. Any other route is handled as a :class:`StrictJsonRoute`."""

    def get_route_handler(self) -> _Handler:
        try:
            fast = self._fast_handler()
        except AttributeError:  # a FastAPI whose dependant or fields look otherwise: FastAPI's own handler
            fast = None
        return super().get_route_handler() if fast is None else role_checked(self, fast)

    def _fast_handler(self) -> _Handler | None:
        if not fastapi_compat.AVAILABLE:
            return None
        d = self.dependant
        special = (
            d.body_params,
            d.cookie_params,
            d.dependencies,
            d.websocket_param_name,
            d.http_connection_param_name,
            d.response_param_name,
            d.background_tasks_param_name,
            d.security_scopes_param_name,
        )
        fields = [*d.path_params, *d.query_params, *d.header_params]
        if any(special) or not all(_plain(f) for f in fields) or not inspect.iscoroutinefunction(d.call):
            return None
        endpoint: Callable[..., Coroutine[Any, Any, Any]] = d.call
        request_name = d.request_param_name
        path = [_Param(f, f.name, "path") for f in d.path_params]
        query = [_Param(f, f.name, "query") for f in d.query_params]
        headers = [_Param(f, _header_name(f), "header") for f in d.header_params]

        async def handler(request: Request) -> Response:
            values: dict[str, Any] = {}
            errors: list[Any] = []
            for params, source in (
                (path, request.path_params),
                (query, request.query_params),
                (headers, request.headers),
            ):
                for param in params:
                    value, param_errors = param.validated(source.get(param.name))
                    if param_errors:
                        errors.extend(param_errors)
                    else:
                        values[param.field.name] = value
            if errors:
                raise RequestValidationError(errors)
            if request_name is not None:
                values[request_name] = request
            response = await endpoint(**values)
            if not isinstance(response, Response):
                raise TypeError(f"{self.path}: a FastParamsRoute endpoint returns a Response, got {type(response)}")
            return response

        return handler


class _Param:
    """One parameter: where it is read, and FastAPI's ``_validate_value_with_model_field`` for
    its value (a string, or None when absent), through query_api/http/fastapi_compat.py."""

    def __init__(self, field: ModelField, name: str, source: str) -> None:
        self.field, self.name, self.loc = field, name, (source, name)
        self.required = field.field_info.is_required()
        self.default = None if self.required else field.default
        # deepcopy() of an immutable scalar is the value itself: skip the call for those.
        self.copy_default = type(self.default) not in (type(None), bool, int, float, str)

    def validated(self, value: str | None) -> tuple[Any, list[Any]]:
        if value is None:
            if self.required:
                return None, [fastapi_compat.missing_error(self.loc)]
            default = deepcopy(self.default) if self.copy_default else self.default
            if not self.field.field_info.validate_default:
                return default, []
            return fastapi_compat.validate(self.field, default, self.loc)
        return fastapi_compat.validate(self.field, value, self.loc)


def _header_name(field: ModelField) -> str:
    """FastAPI's: the parameter's name, its underscores hyphens unless the Header says otherwise."""
    return field.name.replace("_", "-") if getattr(field.field_info, "convert_underscores", True) else field.name


def _plain(field: ModelField) -> bool:
    """A parameter FastAPI reads as one string: no alias, not a sequence or a model, no Json."""
    info = field.field_info
    if info.alias not in (None, field.name) or info.validation_alias is not None or info.default_factory is not None:
        return False
    if any(type(m).__name__ == "Json" for m in info.metadata):
        return False
    return not _nests_a_sequence_or_class(info.annotation)


def _nests_a_sequence_or_class(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return False
    if origin is not None:
        if isinstance(origin, type) and issubclass(origin, _SEQUENCES):
            return True
        return any(_nests_a_sequence_or_class(a) for a in typing.get_args(annotation))
    return annotation not in (str, int, bool, float, type(None))
