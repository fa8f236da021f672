"""The one place that names uvicorn's internal HTTP protocol, which ``convlog serve`` extends.

convlog/runtime/http_server.py subclasses ``HttpToolsProtocol`` (uvicorn's httptools protocol,
not a public API) to bound a request head in time and size and to read a refused body's rest
before closing. What it relies on, for the uvicorn versions in :data:`VERSIONS` (pyproject.toml's
range; tests/compat/test_uvicorn_compat.py checks the installed uvicorn against it, with this
behaviour):

- the asyncio protocol methods (``connection_made``, ``data_received``, ``connection_lost``) and
  llhttp's callbacks (``on_message_begin``, ``on_url``, ``on_header``, ``on_headers_complete``,
  ``on_message_complete``), each called once per event, in that order; an exception raised in a
  callback makes uvicorn answer 400;
- ``on_response_complete``, called once a response is written, which starts a pipelined request;
- the attributes ``transport``, ``loop``, ``logger``, ``flow`` (``resume_reading``),
  ``pipeline`` (the requests queued behind the current one), ``server_state.total_requests``
  and ``cycle`` (the current request's, set by ``on_headers_complete``), whose ``transport``
  the response is written through;
- ``send_400_response(message)``, which answers 400 and closes.
"""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["DISTRIBUTION", "VERSIONS", "HttpToolsProtocol"]

DISTRIBUTION = "uvicorn"
VERSIONS = ">=0.30,<0.55"  # written for 0.54; pyproject.toml's range (an internal class: the next minor is unknown)
