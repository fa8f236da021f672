"""Where the service is and the token to show it: arguments first, else ``CONVLOG_URL`` and
``CONVLOG_TOKEN``.

The one other place convlog reads the environment besides ``convlog/settings/``, on purpose:
that module declares the *service's* settings (and pulls in pydantic-settings); the client is a
separate library surface an app imports without the service, and its two variables name the
service to call, not a setting of it. They are read only here, when a client is made.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"  # where `convlog serve` listens by default
URL_VARIABLE = "CONVLOG_URL"
TOKEN_VARIABLE = "CONVLOG_TOKEN"  # noqa: S105 -- the variable's name, not a token
# Each try's bounds: 10 s to connect, send and get a pooled connection; 35 s for the answer,
# longer than serve's default wait for Kafka's acknowledgement (CONVLOG_KAFKA_ACK_TIMEOUT_S, 30 s).
# A shorter read bound gave up on an append the service was still waiting on and sent it again:
# with the same Idempotency-Key the read models kept one, but the log held the message twice.
DEFAULT_TIMEOUT = httpx.Timeout(10.0, read=35.0)


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
