"""A request's path and query are UTF-8 once percent-decoded, or the request is 422.

ASGI servers (and Starlette's query parser) decode them with U+FFFD in place of bytes that are
not UTF-8, so ``a%FFb``, ``a%FEb`` and a lone surrogate's ``%ED%A0%80`` would all name the
conversation ``a\\ufffdb``: three ids, one conversation. The raw bytes are checked before any
route sees the decoded text (after authentication: 401 still comes first).
"""

from __future__ import annotations

from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Receive, Scope, Send

from query_api.http.deps import error_response

# The literal path segment before an id, and the id's parameter name (the field an error names).
_ID_AFTER = {"users": "user_id", "conversations": "conversation_id", "messages": "message_id"}


class Utf8Request:
    """Answers 422 ``invalid_request`` (``field``: the id or query parameter, else ``path`` /
    ``query``) for a path or query string whose percent-decoded bytes are not UTF-8."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = not_utf8(scope) if scope["type"] == "http" else None
        if refused is None:
            await self.app(scope, receive, send)
            return
        field, raw = refused
        message = f"{raw!r} is not UTF-8 once percent-decoded: ids and parameters are UTF-8 text"
        await error_response(422, "invalid_request", message, field=field)(scope, receive, send)


def not_utf8(scope: Scope) -> tuple[str, str] | None:
    """The field and raw text of the first path segment or query parameter that is not UTF-8."""
    raw_path: bytes = scope.get("raw_path") or b""  # optional in ASGI: without it, nothing to check
    if not (raw_path.isascii() and b"%" not in raw_path):
        previous = b""
        for segment in raw_path.split(b"/"):
            if not _utf8(segment):
                return _ID_AFTER.get(previous.decode("ascii", "replace"), "path"), _shown(segment)
            previous = segment
    query: bytes = scope.get("query_string", b"")
    if not (query.isascii() and b"%" not in query):
        for pair in query.split(b"&"):
            name, _, value = pair.partition(b"=")
            if not _utf8(name):
                return "query", _shown(name)
            if not _utf8(value):
                return unquote_to_bytes(name.replace(b"+", b" ")).decode("utf-8"), _shown(value)
    return None


def _utf8(part: bytes) -> bool:
    try:
        unquote_to_bytes(part.replace(b"+", b" ")).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _shown(raw: bytes) -> str:
    return raw.decode("ascii", "backslashreplace")
