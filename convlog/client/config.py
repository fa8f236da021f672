"""Where the service is and the token to show it: arguments first, else ``CONVLOG_URL`` and
``CONVLOG_TOKEN``.

The one other place convlog reads the environment besides ``convlog/settings.py``, on purpose:
that module declares the *service's* settings (and pulls in pydantic-settings); the client is a
separate library surface an app imports without the service, and its two variables name the
service to call, not a setting of it. They are read only here, when a client is made.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

DEFAULT_URL = "http://127.0.0.1:8080"  # where `convlog serve` listens by default
URL_VARIABLE = "CONVLOG_URL"
TOKEN_VARIABLE = "CONVLOG_TOKEN"  # noqa: S105 -- the variable's name, not a token


def endpoint(
    base_url: str | None, token: str | None, *, env: Mapping[str, str] | None = None
) -> tuple[str, str | None]:
    """The base URL and the bearer token (None: send none) a client uses."""
    env = os.environ if env is None else env
    url = base_url or env.get(URL_VARIABLE) or DEFAULT_URL
    return url.rstrip("/"), token or env.get(TOKEN_VARIABLE) or None


def headers(token: str | None) -> dict[str, str]:
    sent = {"Accept": "application/json", "User-Agent": "convlog-client/0.1"}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    return sent
