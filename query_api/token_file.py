"""The API's tokens: ``CONVLOG_API_TOKENS`` (plain, ``app``) and the token file
(``CONVLOG_API_TOKENS_FILE``: hashes, roles, ids), re-read while the service runs.

The file is TOML, one ``[[tokens]]`` table per token::

    [[tokens]]
    id = "support-bot"        # optional: names the token in logs and audit records
    tenant = "acme"
    role = "app"              # app | auditor | admin (default app)
    hash = "sha256:9f86d0…"   # `convlog tokens hash` prints it

Reloading: at most every ``reload_s`` seconds, the first request after that looks at the file
(its modification time, size and inode: a rename onto it counts); a changed file is read and,
when valid, replaces the file's tokens at once — a token added works, one removed is refused
(401) from then on. A file that is malformed (or missing) when read again keeps the tokens read
last and logs ``api_tokens.reload_failed``; at start it is a :class:`ConfigurationError`.
"""

from __future__ import annotations

import hashlib
import re
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import structlog

from events.errors import ConfigurationError, InvalidKeyError
from events.keys import check_key_part
from query_api.auth import HASH_PREFIX, ROLES, Caller, Role, TokenEntry, caller_of, indexed, plain_entries

log = structlog.get_logger(__name__)

_HASH = re.compile(r"sha256:[0-9a-f]{64}\Z")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}\Z")
_KEYS = frozenset({"id", "tenant", "role", "hash"})


def read_token_file(path: Path) -> list[tuple[str, TokenEntry]]:
    """The file's entries, each with where it is (``tokens.toml entry 2``); a file that cannot
    be read or is not as described above is a :class:`ConfigurationError` saying what to fix."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigurationError(f"CONVLOG_API_TOKENS_FILE {path}: {e}") from None
    tables = document.get("tokens", [])
    extra = sorted(set(document) - {"tokens"})
    if extra or not isinstance(tables, list):
        raise ConfigurationError(f"CONVLOG_API_TOKENS_FILE {path}: expected only [[tokens]] tables, got {extra}")
    return [(f"{path.name} entry {n}", _entry(path, n, t)) for n, t in enumerate(tables, start=1)]


def _entry(path: Path, number: int, table: object) -> TokenEntry:
    where = f"CONVLOG_API_TOKENS_FILE {path}, entry {number}"
    if not isinstance(table, dict):
        raise ConfigurationError(f"{where}: expected a [[tokens]] table")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigurationError(f"{where}: unknown keys {unknown} (known: hash, tenant, role, id)")
    digest, tenant, role, name = (table.get(k) for k in ("hash", "tenant", "role", "id"))
    if not isinstance(digest, str) or not _HASH.match(digest.lower()):
        raise ConfigurationError(f"{where}: hash must be 'sha256:' and 64 hex digits (`convlog tokens hash`)")
    try:
        check_key_part("tenant", tenant)
    except InvalidKeyError as e:
        raise ConfigurationError(f"{where}: {e}") from None
    if role is None:
        role = "app"
    if role not in ROLES:
        raise ConfigurationError(f"{where}: role must be one of {', '.join(ROLES)}, not {role!r}")
    if name is not None and (not isinstance(name, str) or not _ID.match(name)):
        raise ConfigurationError(f"{where}: id must be 1-64 letters, digits or ._:@- (it names the token in logs)")
    return TokenEntry(digest.lower(), cast("str", tenant), cast("Role", role), name)


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class ApiTokens:
    """Every token the API knows, by hash; :meth:`caller` authenticates a request's
    ``Authorization`` header. ``app_erase=False`` withholds ``erase`` from ``app`` tokens."""

    def __init__(
        self,
        plain: Mapping[str, str] | None = None,
        *,
        file: Path | None = None,
        reload_s: float = 5.0,
        app_erase: bool = True,
    ) -> None:
        self._plain = [(f"CONVLOG_API_TOKENS entry {n}", e) for n, e in enumerate(plain_entries(plain or {}), 1)]
        self._file, self._reload_s, self._app_erase = file, reload_s, app_erase
        self._signature = _signature(file) if file is not None else None
        self._callers = self._load()  # at start, every problem raises
        self._next_check = time.monotonic() + reload_s

    def _load(self) -> dict[str, Caller]:
        entries = [*self._plain, *(read_token_file(self._file) if self._file is not None else [])]
        return {digest: caller_of(e, app_erase=self._app_erase) for digest, e in indexed(entries).items()}

    def __len__(self) -> int:
        return len(self._callers)

    def caller(self, authorization: str | None) -> Caller | None:
        """The caller a ``Bearer`` token is; None for a missing or unknown one."""
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        if self._file is not None and time.monotonic() >= self._next_check:
            self.reload()
        return self._callers.get(HASH_PREFIX + hashlib.sha256(token.encode()).hexdigest())

    def reload(self) -> None:
        """Read the file again if it changed since last read; a bad file keeps the tokens."""
        self._next_check = time.monotonic() + self._reload_s
        signature = _signature(self._file) if self._file is not None else None
        if signature == self._signature:
            return
        self._signature = signature  # a bad file is reported once, until it changes again
        try:
            callers = self._load()
        except ConfigurationError as e:  # (what is wrong with the file; no traceback to add)
            log.error("api_tokens.reload_failed", error=str(e), kept=len(self._callers))  # noqa: TRY400
            return
        before, self._callers = self._callers, callers
        log.info("api_tokens.reloaded", tokens=len(callers), **_changes(before, callers))


def _changes(before: Mapping[str, Caller], after: Mapping[str, Caller]) -> dict[str, Any]:
    """The token ids added and removed (a changed role or tenant counts as both)."""
    added = sorted(c.token_id for d, c in after.items() if before.get(d) != c)
    removed = sorted(c.token_id for d, c in before.items() if after.get(d) != c)
    return {"added": added, "removed": removed}
