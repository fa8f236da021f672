"""Token roles on the real service (issue 27, item 3): every route of the schema declares what it
needs and each role gets exactly that (403 ``forbidden_role`` else, before the body is read); an
auditor sees nothing of another tenant; plain ``CONVLOG_API_TOKENS`` are app tokens as before;
the token file is re-read while serving; logs name tokens by id, never the token."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from convlog.runtime.serve import Service, running_service
from convlog.settings import Settings
from query_api.auth import token_hash
from query_api.http import create_app
from query_api.http.roles import ROUTE_NEEDS
from tests.projection_support import temporary_database

pytestmark = pytest.mark.postgres

BASE = "/v1/users/u1/conversations"
TOKENS = {"app": "token-a", "auditor": "auditor-token-acme", "admin": "admin-token-acme"}
HEADERS = {role: {"Authorization": f"Bearer {token}"} for role, token in TOKENS.items()}
GLOBEX_AUDITOR = {"Authorization": "Bearer auditor-token-globex"}
RELOAD_S = 0.2


def entry(token: str, tenant: str, role: str, name: str | None = None) -> str:
    named = f'id = "{name}"\n' if name else ""
    return f'[[tokens]]\n{named}tenant = "{tenant}"\nrole = "{role}"\nhash = "{token_hash(token)}"\n'


FILE = (
    entry(TOKENS["auditor"], "acme", "auditor", "dpo-acme")
    + entry(TOKENS["admin"], "acme", "admin", "ops-acme")
    + entry("auditor-token-globex", "globex", "auditor")
)


def replace_file(path: Path, text: str) -> None:
    """As an operator's tooling does: a new file renamed onto the old one."""
    staged = path.with_suffix(".new")
    staged.write_text(text, encoding="utf-8")
    staged.replace(path)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.toml"
    path.write_text(FILE, encoding="utf-8")
    return path


async def _service(pg_admin_url: str, tmp_path: Path, token_file: Path, **fields: Any) -> AsyncIterator[Service]:
    fields: dict[str, Any] = {
        "data_dir": tmp_path,
        "partitions": 2,
        "summarizer": "off",
        "api_tokens": "acme:token-a,globex:token-b",
        "api_tokens_file": token_file,
        "api_tokens_reload_s": RELOAD_S,
        **fields,
    }
    async with (
        temporary_database(pg_admin_url) as url,
        running_service(Settings(database_url=url, **fields)) as service,
    ):
        yield service


@pytest.fixture
async def client(pg_admin_url: str, tmp_path: Path, token_file: Path) -> AsyncIterator[httpx.AsyncClient]:
    async for service in _service(pg_admin_url, tmp_path, token_file, http_access_log=True):
        transport = httpx.ASGITransport(app=create_app(service.deps))
        async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as http:
            yield http


async def _conversation(client: httpx.AsyncClient, cid: str, headers: dict[str, str]) -> None:
    """A conversation of the headers' tenant, projected (read-your-writes through the context)."""
    appended = await client.post(f"{BASE}/{cid}/messages", json={"role": "user", "content": "hello"}, headers=headers)
    assert appended.status_code == 202, appended.text
    params = {"model": "gpt-4o", "budget_tokens": 1000, "min_offset": appended.json()["offset"]}
    assert (await client.get(f"{BASE}/{cid}/context", params=params, headers=headers)).status_code == 200


# What each role may do, stated here apart from query_api/auth.py (the routes of issue 27's
# audit work, ``audit``, come with that work).
MAY: dict[str, set[str]] = {"auditor": {"read"}, "app": {"read", "write", "erase"}, "admin": {"read", "write", "erase"}}


def _expected_needs(method: str, template: str) -> str:
    """Every GET reads, every POST writes, a DELETE erases — but an OpenAI item's, a redaction."""
    if template in ("/healthz", "/readyz", "/metrics"):
        return "public"
    if method == "DELETE":
        return "write" if template.endswith("/items/{item_id}") else "erase"
    return {"GET": "read", "POST": "write"}[method]


def _operations(spec: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted((method.upper(), path) for path, item in spec["paths"].items() for method in item)


def _concrete(path: str) -> str:
    names = {"{user_id}": "u1", "{conversation_id}": "c1", "{message_id}": "m1", "{item_id}": "i1"}
    for name, value in names.items():
        path = path.replace(name, value)
    return path


async def test_every_route_declares_what_it_needs_and_each_role_gets_exactly_that(
    client: httpx.AsyncClient,
) -> None:
    """Walks /openapi.json: a route the table does not declare fails here (and create_app
    refuses it). A refused caller's body is never read: an unparsable one is still a 403."""
    await _conversation(client, "c1", HEADERS["app"])
    operations = _operations((await client.get("/openapi.json")).json())
    assert len(operations) >= 20
    assert sorted(ROUTE_NEEDS) == operations  # no route undeclared, no declaration stale
    for method, template in operations:
        needs = ROUTE_NEEDS[method, template]
        assert needs == _expected_needs(method, template), (method, template)
        if needs == "public":
            continue
        for role in ("auditor", "app", "admin"):  # erasing last: the others read c1 first
            allowed = needs in MAY[role]
            body = b'{"role": "user", "content": "x"}' if allowed else b"[not json"
            response = await client.request(
                method,
                _concrete(template),
                params={"model": "gpt-4o", "budget_tokens": 100} if template.endswith("/context") else None,
                content=body if method == "POST" else None,
                headers={**HEADERS[role], "Content-Type": "application/json"},
            )
            if allowed:
                assert response.status_code != 403, (role, method, template, response.text)
                assert response.status_code < 500, (role, method, template, response.text)
            else:
                assert response.status_code == 403, (role, method, template, response.text)
                error = response.json()["error"]
                assert (error["code"], error["role"], error["needs"]) == ("forbidden_role", role, needs)


async def test_an_auditor_reads_everything_of_its_tenant_and_nothing_of_another(client: httpx.AsyncClient) -> None:
    await _conversation(client, "c1", HEADERS["app"])
    auditor = HEADERS["auditor"]
    transcript = await client.get(f"{BASE}/c1/messages", headers=auditor)
    assert transcript.status_code == 200, transcript.text
    assert [m["content"] for m in transcript.json()["messages"]] == ["hello"]
    events = (await client.get(f"{BASE}/c1/events", headers=auditor)).json()["events"]
    offset = events[0]["offset"]
    as_of = await client.get(
        f"{BASE}/c1/context", params={"model": "gpt-4o", "budget_tokens": 100, "as_of": offset}, headers=auditor
    )
    assert as_of.status_code == 200, as_of.text
    assert [c["conversation_id"] for c in (await client.get(BASE, headers=auditor)).json()["conversations"]] == ["c1"]
    assert (await client.get(f"{BASE}/c1/summaries", headers=auditor)).status_code == 200
    # globex's auditor: acme's conversation does not exist for it
    for path in (f"{BASE}/c1/messages", f"{BASE}/c1/events", f"{BASE}/c1/summaries"):
        response = await client.get(path, headers=GLOBEX_AUDITOR)
        assert response.status_code == 404, (path, response.text)
    context = await client.get(
        f"{BASE}/c1/context", params={"model": "gpt-4o", "budget_tokens": 100, "as_of": offset}, headers=GLOBEX_AUDITOR
    )
    assert context.status_code == 404, context.text
    assert (await client.get(BASE, headers=GLOBEX_AUDITOR)).json()["conversations"] == []


async def test_reads_by_auditors_are_recorded_and_no_log_line_holds_a_token(client: httpx.AsyncClient) -> None:
    await _conversation(client, "c1", HEADERS["app"])
    with capture_logs() as logs:
        assert (await client.get(f"{BASE}/c1/messages", headers=HEADERS["auditor"])).status_code == 200
        assert (await client.get(f"{BASE}/c2/events", headers=HEADERS["auditor"])).status_code == 404
        assert (await client.get(f"{BASE}/c1/messages", headers=HEADERS["app"])).status_code == 200
        assert (await client.get(f"{BASE}/c1/messages", headers={"Authorization": "Bearer nope"})).status_code == 401
    reads = [e for e in logs if e["event"] == "audit.read"]
    assert [(e["token"], e["tenant"], e["conversation_id"], e["route"], e["status"]) for e in reads] == [
        ("dpo-acme", "acme", "c1", "/v1/users/{user_id}/conversations/{conversation_id}/messages", 200),
        ("dpo-acme", "acme", "c2", "/v1/users/{user_id}/conversations/{conversation_id}/events", 404),
    ]  # an app's own reads are not audit reads
    requests = [(e["token"], e["status"]) for e in logs if e["event"] == "http.request"]
    plain_id = "sha256:" + hashlib.sha256(b"token-a").hexdigest()[:16]
    assert requests == [("dpo-acme", 200), ("dpo-acme", 404), (plain_id, 200), (None, 401)]
    assert all(e["route"].startswith(("/v1/", "unauthenticated")) for e in logs if e["event"] == "http.request")
    text = repr(logs)
    assert not any(token in text for token in [*TOKENS.values(), "nope"])


async def test_plain_tokens_erase_as_before_with_their_digest_as_who_asked(client: httpx.AsyncClient) -> None:
    await _conversation(client, "c1", HEADERS["app"])
    erased = await client.delete(f"{BASE}/c1", headers=HEADERS["app"])
    assert erased.status_code == 202, erased.text
    events = (await client.get(f"{BASE}/c1/events", headers=HEADERS["admin"])).json()["events"]
    assert events[-1]["body"]["requested_by"] == "token:sha256:" + hashlib.sha256(b"token-a").hexdigest()[:16]
    await _conversation(client, "c2", HEADERS["app"])
    user = await client.delete("/v1/users/u1", headers=HEADERS["admin"])
    assert user.status_code == 202, user.text
    events = (await client.get(f"{BASE}/c2/events", headers=HEADERS["admin"])).json()["events"]
    assert events[-1]["body"]["requested_by"] == "token:ops-acme"


async def test_an_operator_may_withhold_erase_from_app_tokens(
    pg_admin_url: str, tmp_path: Path, token_file: Path
) -> None:
    async for service in _service(pg_admin_url, tmp_path, token_file, app_tokens_erase=False):
        transport = httpx.ASGITransport(app=create_app(service.deps))
        async with httpx.AsyncClient(transport=transport, base_url="http://convlog") as client:
            await _conversation(client, "c1", HEADERS["app"])
            for method, path in (("DELETE", f"{BASE}/c1"), ("DELETE", "/v1/users/u1")):
                refused = await client.request(method, path, headers=HEADERS["app"])
                assert refused.status_code == 403, refused.text
                assert "CONVLOG_APP_TOKENS_ERASE=false" in refused.json()["error"]["message"]
            created = await client.post("/v1/conversations", json={}, headers=HEADERS["app"])
            deleted = await client.delete(f"/v1/conversations/{created.json()['id']}", headers=HEADERS["app"])
            assert (deleted.status_code, deleted.json()["error"]["type"]) == (403, "permission_error")
            assert (await client.post(f"{BASE}/c1/clear", headers=HEADERS["app"])).status_code == 202
            assert (await client.delete(f"{BASE}/c1", headers=HEADERS["admin"])).status_code == 202


async def _status(client: httpx.AsyncClient, token: str) -> int:
    return (await client.get(BASE, headers={"Authorization": f"Bearer {token}"})).status_code


async def _eventually(client: httpx.AsyncClient, token: str, status: int) -> None:
    """The answer for ``token`` becomes ``status`` within the reload interval (and a little)."""
    deadline = RELOAD_S * 5
    waited = 0.0
    while await _status(client, token) != status:
        assert waited < deadline, f"still not {status} after {waited:.1f} s"
        await asyncio.sleep(0.05)
        waited += 0.05


async def test_the_token_file_is_read_again_while_serving(client: httpx.AsyncClient, token_file: Path) -> None:
    assert await _status(client, "new-token") == 401
    with capture_logs() as logs:
        replace_file(token_file, FILE + entry("new-token", "acme", "app", "new-app"))
        await _eventually(client, "new-token", 200)  # added: works
        kept = entry(TOKENS["admin"], "acme", "admin", "ops-acme") + entry("new-token", "acme", "app")
        replace_file(token_file, kept)
        await _eventually(client, TOKENS["auditor"], 401)  # removed: refused
        replace_file(token_file, "[[tokens]]\ntenant = 'acme'\nhash = 'md5:abc'\n")  # malformed: kept
        await asyncio.sleep(RELOAD_S * 2)
        assert await _status(client, "new-token") == 200
        assert await _status(client, TOKENS["admin"]) == 200
    assert await _status(client, "token-a") == 200  # CONVLOG_API_TOKENS is not the file's
    reloaded = [e for e in logs if e["event"] == "api_tokens.reloaded"]
    assert reloaded[0]["added"] == ["new-app"]
    assert "dpo-acme" in reloaded[1]["removed"]
    failed = [e for e in logs if e["event"] == "api_tokens.reload_failed"]
    assert len(failed) == 1
    assert "hash must be 'sha256:'" in failed[0]["error"]
    assert failed[0]["log_level"] == "error"
