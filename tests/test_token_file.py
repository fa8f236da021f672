"""The token file (``CONVLOG_API_TOKENS_FILE``) at start: what it lists authenticates, with its
role and id; a token listed twice, a malformed file or one that cannot be read stops ``serve``
before anything starts, saying what to fix and never showing a token. ``convlog tokens hash``
prints what the file lists."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi import APIRouter

from convlog.runtime.serve import api_tokens, running_service
from convlog.settings import Settings
from events.errors import ConfigurationError
from query_api.auth import token_hash
from query_api.http.roles import refuse_undeclared
from query_api.token_file import ApiTokens

REPO = Path(__file__).resolve().parents[1]


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tokens.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _entry(token: str, tenant: str = "acme", role: str = "app", name: str | None = None) -> str:
    named = f'id = "{name}"\n' if name else ""
    return f'[[tokens]]\n{named}tenant = "{tenant}"\nrole = "{role}"\nhash = "{token_hash(token)}"\n'


def test_a_listed_hash_authenticates_as_its_tenant_role_and_id(tmp_path: Path) -> None:
    path = _file(tmp_path, _entry("s3cret", "acme", "auditor", "dpo-1") + _entry("other", "globex"))
    tokens = ApiTokens({"plain": "initech"}, file=path)
    auditor = tokens.caller("Bearer s3cret")
    assert auditor is not None
    assert (auditor.tenant_id, auditor.role, auditor.token_id, auditor.actions) == (
        "acme",
        "auditor",
        "dpo-1",
        frozenset({"read", "audit"}),
    )
    unnamed, plain = tokens.caller("bearer other"), tokens.caller("Bearer plain")
    assert unnamed is not None
    assert plain is not None
    assert (unnamed.role, unnamed.token_id) == ("app", token_hash("other")[:23])  # sha256: and 16 digits
    assert (plain.tenant_id, plain.role) == ("initech", "app")
    for refused in (None, "", "Bearer ", "Bearer nope", "s3cret", "Basic s3cret", f"Bearer {token_hash('s3cret')}"):
        assert tokens.caller(refused) is None, refused
    assert "erase" not in (ApiTokens({"plain": "initech"}, app_erase=False).caller("Bearer plain") or auditor).actions


@pytest.mark.parametrize(
    ("text", "plain", "message"),
    [
        (_entry("t1", name="a") + _entry("t1", "globex", name="b"), {}, "tokens.toml entry 1 and tokens.toml entry 2"),
        (_entry("t1"), {"t1": "acme"}, "CONVLOG_API_TOKENS entry 1 and tokens.toml entry 1 are the same token"),
        (_entry("t1", name="ops") + _entry("t2", name="ops"), {}, "have the same id 'ops'"),
        ("[[tokens]\n", {}, "tokens.toml"),
        ('[[tokens]]\ntenant = "acme"\nhash = "sha256:abc"\n', {}, "hash must be 'sha256:' and 64 hex digits"),
        (_entry("t1", role="root"), {}, "role must be one of app, auditor, admin, not 'root'"),
        (_entry("t1") + 'tennant = "acme"\n', {}, "unknown keys ['tennant']"),
        (_entry("t1", tenant=""), {}, "tenant: must not be empty"),
        (_entry("t1", name="has space"), {}, "id must be 1-64 letters"),
        ('[token]\nhash = "x"\n', {}, "expected only [[tokens]] tables, got ['token']"),
    ],
)
def test_a_token_twice_or_a_malformed_file_is_refused_at_start(
    tmp_path: Path, text: str, plain: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        ApiTokens(plain, file=_file(tmp_path, text))
    assert message in str(caught.value)
    assert "t1" not in str(caught.value).replace("entry 1", "")  # never the token


async def test_serve_refuses_a_bad_token_file_before_it_opens_anything(tmp_path: Path) -> None:
    missing = Settings(data_dir=tmp_path / "data", api_tokens_file=tmp_path / "nowhere.toml")
    with pytest.raises(ConfigurationError, match=r"nowhere\.toml"):
        api_tokens(missing)
    twice = Settings(data_dir=tmp_path / "data", api_tokens="acme:t1", api_tokens_file=_file(tmp_path, _entry("t1")))
    with pytest.raises(ConfigurationError, match="are the same token"):
        async with running_service(twice):
            pass
    assert not (tmp_path / "data").exists()  # no log, no key store, no Postgres was made


def test_convlog_tokens_hash_prints_what_the_file_lists(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "convlog.cli.main", "tokens", "hash"]
    done = subprocess.run(command, input="s3cret\n", capture_output=True, text=True, env=env, check=True)
    assert done.stdout == token_hash("s3cret") + "\n"
    path = _file(tmp_path, f'[[tokens]]\ntenant = "acme"\nhash = "{done.stdout.strip()}"\n')
    assert ApiTokens(file=path).caller("Bearer s3cret") is not None
    made = subprocess.run(
        [sys.executable, "-m", "convlog.cli.main", "tokens", "new", "--tenant", "acme", "--role", "admin"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    token = made.stdout.splitlines()[0].rsplit(" ", 1)[1]
    entry = made.stdout.split("\n", 1)[1]
    admin = ApiTokens(file=_file(tmp_path, entry)).caller(f"Bearer {token}")
    assert admin is not None
    assert (admin.tenant_id, admin.role) == ("acme", "admin")
    assert len(token) >= 43  # 256 bits, URL-safe base64


def test_a_route_without_a_declared_role_stops_the_app_being_built() -> None:
    router = APIRouter()

    @router.get("/v1/undeclared")
    async def undeclared() -> None: ...

    with pytest.raises(TypeError, match=r"\['GET'\] /v1/undeclared"):
        refuse_undeclared(router.routes)
