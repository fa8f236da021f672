"""The one place that touches FastAPI's private ``fastapi._compat``: a parameter's validator.

:class:`~query_api.http.fast_params.FastParamsRoute` validates each of a route's parameters
with the validator FastAPI built for it (a ``ModelField``, with its TypeAdapter), and reports a
missing one with FastAPI's own error, so its answers are FastAPI's. Neither is public: they are
named here only, for the FastAPI versions in :data:`VERSIONS` (pyproject.toml's range, which
tests/compat/test_fastapi_compat.py checks the installed FastAPI against with the behaviour
relied on). A FastAPI without them leaves :data:`AVAILABLE` false: every route then gets
FastAPI's own handler.
"""

from __future__ import annotations

from typing import Any

try:  # not public: a FastAPI without them gets its own handler on every route
    from fastapi._compat import ModelField, get_missing_field_error
except ImportError:  # pragma: no cover - depends on the installed FastAPI
    AVAILABLE = False
else:
    AVAILABLE = True

__all__ = ["AVAILABLE", "DISTRIBUTION", "VERSIONS", "ModelField", "missing_error", "validate"]

DISTRIBUTION = "fastapi"
VERSIONS = ">=0.115,<0.166"  # written for 0.165; pyproject.toml's range (a private API: the next minor is unknown)

Errors = list[Any]  # FastAPI's error dicts, as RequestValidationError takes them


def validate(field: ModelField, value: Any, loc: tuple[str, str]) -> tuple[Any, Errors]:
    """``value`` validated by ``field`` as FastAPI validates a parameter: (the value, []) or
    (None, its errors) located at ``loc``."""
    return field.validate(value, {}, loc=loc)


def missing_error(loc: tuple[str, str]) -> Any:
    """FastAPI's error for a required parameter the request lacks."""
    return get_missing_field_error(loc=loc)
