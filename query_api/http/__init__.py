"""The HTTP API (FastAPI): ``app.create_app`` builds it from :class:`ApiDeps`.

``deps`` holds what the routes share (the dependencies: the query service of query_api/live/,
the producer, the HTTP settings; ``ApiError``, the caller a token is and the per-request
helpers); ``app`` maps the domain's errors to answers, in one place; ``middleware``
authenticates, bounds bodies and counts requests; ``roles`` says what each route needs of its
caller's role; ``strict_json`` reads request bodies
strictly; one ``routes_*`` module per group of routes: ``health`` (probes and metrics),
``appends`` (messages, clear, erase), ``context`` (the context a model is sent, live or as of an
offset), ``audit`` (transcript, summaries, raw events) and ``conversations`` (the list).
"""

from __future__ import annotations

from query_api.http.app import create_app
from query_api.http.deps import ApiDeps, ApiError, HttpSettings

__all__ = ["ApiDeps", "ApiError", "HttpSettings", "create_app"]
