"""What each route needs of its caller: :data:`ROUTE_NEEDS`, the one table (method, path) ->
the action it performs (query_api/auth.py says which roles may), and the check every route
class runs before anything else of the route (its body is not read for a caller refused).

A caller whose role lacks the action gets 403 ``forbidden_role``. A route the table does not
declare is refused to every caller, and :func:`refuse_undeclared` stops ``create_app`` from
building an app with one (tests/test_roles.py walks the OpenAPI schema too). A read by a token
that is not an ``app`` token — an auditor's, an admin's — is recorded as a log line
``audit.read``: who (token id, role, tenant), which conversation, which route, the answer's
status, when. Never content: ids and the route template only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Literal

import structlog
from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.routing import BaseRoute
from starlette.types import Scope

from query_api.auth import ROLE_ACTIONS, ROLES, Action, Caller
from query_api.http.deps import PREFIX, error_response
from query_api.http.openai_errors import OPENAI_PREFIX

log = structlog.get_logger(__name__)

CALLER = "convlog.caller"  # the scope key the middleware puts the authenticated Caller under
AUDIT_READ = "convlog.audit_read"  # set on a read the middleware records
Needs = Action | Literal["public"]
_C = PREFIX + "/{conversation_id}"
_O = OPENAI_PREFIX + "/{conversation_id}"

ROUTE_NEEDS: Mapping[tuple[str, str], Needs] = {
    ("GET", "/healthz"): "public",
    ("GET", "/readyz"): "public",
    ("GET", "/metrics"): "public",
    # contexts (live, and rebuilt with as_of / before_message), the audit reads, the listing
    ("GET", _C + "/context"): "read",
    ("GET", _C + "/messages"): "read",
    ("GET", _C + "/summaries"): "read",
    ("GET", _C + "/events"): "read",
    ("GET", PREFIX): "read",
    # appends, redactions, clears, a conversation's data key
    ("POST", _C + "/messages"): "write",
    ("POST", _C + "/messages/{message_id}/redact"): "write",
    ("POST", _C + "/clear"): "write",
    ("POST", _C + "/key"): "write",
    # erasures: a conversation, a user
    ("DELETE", _C): "erase",
    ("DELETE", "/v1/users/{user_id}"): "erase",
    # OpenAI's Conversations API: delete is convlog's erase, an item's delete a redaction
    ("POST", OPENAI_PREFIX): "write",
    ("GET", _O): "read",
    ("POST", _O): "write",
    ("DELETE", _O): "erase",
    ("POST", _O + "/items"): "write",
    ("GET", _O + "/items"): "read",
    ("GET", _O + "/items/{item_id}"): "read",
    ("DELETE", _O + "/items/{item_id}"): "write",
}

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def needs_of(route: APIRoute) -> Needs | None:
    """The action ``route`` declares (one for all its methods); None when undeclared."""
    declared = {ROUTE_NEEDS.get((method, route.path_format)) for method in route.methods or ()}
    return declared.pop() if len(declared) == 1 else None


def refuse_undeclared(routes: Iterable[BaseRoute]) -> None:
    """A route of the app the table does not declare: the app is not built."""
    api_routes = [r for r in routes if isinstance(r, APIRoute)]
    missing = [f"{sorted(r.methods or ())} {r.path_format}" for r in api_routes if needs_of(r) is None]
    if missing:
        raise TypeError(f"routes without a declared role (query_api/http/roles.py ROUTE_NEEDS): {missing}")


def role_checked(route: APIRoute, handler: Handler) -> Handler:
    """``handler``, answering 403 first when the authenticated caller's role lacks what the
    route needs (without a caller — a public route, an app without the middleware — as it is)."""
    needs = needs_of(route)
    recorded = needs in ("read", "audit")

    @functools.wraps(handler)  # (its name stays the handler's: tests tell route classes apart by it)
    async def checked(request: Request) -> Response:
        caller: Caller | None = request.scope.get(CALLER)
        if caller is None:
            return await handler(request)
        if needs is None or needs == "public" or needs not in caller.actions:
            return _forbidden(caller, needs)
        if recorded and caller.role != "app":
            request.scope[AUDIT_READ] = True  # the middleware logs it with the answer's status
        return await handler(request)

    return checked


def _forbidden(caller: Caller, needs: Needs | None) -> Response:
    if needs is None or needs == "public":
        return error_response(403, "forbidden_role", "this route declares no role: no token may call it")
    roles = [r for r in ROLES if needs in ROLE_ACTIONS[r]]
    withheld = caller.role == "app" and needs == "erase"  # CONVLOG_APP_TOKENS_ERASE=false
    why = " (withheld from app tokens by CONVLOG_APP_TOKENS_ERASE=false)" if withheld else ""
    return error_response(
        403,
        "forbidden_role",
        f"a token of role {caller.role!r} may not {needs}{why}; this route needs one of: {', '.join(roles)}",
        role=caller.role,
        needs=needs,
    )


def log_audit_read(scope: Scope, caller: Caller, route: str, status: int) -> None:
    """``audit.read``: who read which conversation through which route, and the answer's status."""
    params: dict[str, Any] = scope.get("path_params", {})
    log.info(
        "audit.read",
        token=caller.token_id,
        role=caller.role,
        tenant=caller.tenant_id,
        user_id=params.get("user_id") or Headers(scope=scope).get("convlog-user-id"),
        conversation_id=params.get("conversation_id"),
        method=scope["method"],
        route=route,
        status=status,
    )
