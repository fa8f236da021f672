"""Who calls: API tokens, their roles, and what each role may do.

A token is known by its SHA-256 (``sha256:<hex>``), never kept as itself: tokens from
``CONVLOG_API_TOKENS`` are hashed when read, and a token file holds only hashes
(query_api/token_file.py). SHA-256 and not a password hash (argon2, bcrypt): an API token is
random and long (``convlog tokens new`` makes 256 bits), so a leaked hash cannot be reversed
by guessing however fast each guess is — slow hashes exist for passwords people choose — and a
request pays one SHA-256 (under a microsecond), not argon2's tens of milliseconds and
megabytes. The lookup is by the presented token's hash: its timing tells nothing about a
stored token's bytes.

Roles are sets of *actions*; each route declares the one action it performs
(query_api/http/roles.py): ``app`` reads and writes its tenant's conversations and erases them
(unless the operator withholds ``erase``); ``auditor`` reads everything of its tenant and the
audit routes, and writes nothing; ``admin`` does everything.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from events.errors import ConfigurationError

Role = Literal["app", "auditor", "admin"]
Action = Literal["read", "write", "erase", "audit"]
ROLES: tuple[Role, ...] = get_args(Role)
ACTIONS: tuple[Action, ...] = get_args(Action)

# read: contexts (live and rebuilt), transcripts, summaries, events, listings.
# write: appends, redactions, clears, a conversation's data key. erase: a conversation, a user.
# audit: the audit routes of the issue-27 work (search, ledger, viewer, export), for people.
ROLE_ACTIONS: Mapping[Role, frozenset[Action]] = {
    "app": frozenset({"read", "write", "erase"}),
    "auditor": frozenset({"read", "audit"}),
    "admin": frozenset(ACTIONS),
}
HASH_PREFIX = "sha256:"


def token_hash(token: str) -> str:
    """``sha256:<hex>`` of a token's UTF-8 bytes: what a token file lists."""
    return HASH_PREFIX + hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class TokenEntry:
    """One known token: its hash, its tenant, its role, and the name logs and audit records
    give it (``name``, else the hash's first 16 hex digits)."""

    digest: str  # sha256:<64 hex>
    tenant_id: str
    role: Role = "app"
    name: str | None = None

    @property
    def token_id(self) -> str:
        return self.name or self.digest[: len(HASH_PREFIX) + 16]


@dataclass(frozen=True)
class Caller:
    """An authenticated request's caller: what routes, logs and audit records know of it."""

    tenant_id: str
    role: Role
    token_id: str
    actions: frozenset[Action]

    @property
    def requested_by(self) -> str:
        """Who asked, as an erasure records it: ``token:<id>`` (never the token)."""
        return f"token:{self.token_id}"


def plain_entries(tokens: Mapping[str, str]) -> list[TokenEntry]:
    """``CONVLOG_API_TOKENS``'s {token: tenant} as entries: ``app`` tokens, known by their hash."""
    return [TokenEntry(token_hash(token), tenant) for token, tenant in tokens.items()]


def indexed(entries: Iterable[tuple[str, TokenEntry]]) -> dict[str, TokenEntry]:
    """{hash: entry}; the same token (hash) or name twice is refused, naming where each came
    from (``where``: "CONVLOG_API_TOKENS entry 2", "tokens.toml entry 3"), never the token."""
    by_digest: dict[str, tuple[str, TokenEntry]] = {}
    by_name: dict[str, str] = {}
    for where, entry in entries:
        if entry.digest in by_digest:
            first = by_digest[entry.digest][0]
            raise ConfigurationError(f"{first} and {where} are the same token: a token is listed once")
        if entry.name is not None and entry.name in by_name:
            raise ConfigurationError(f"{by_name[entry.name]} and {where} have the same id {entry.name!r}")
        by_digest[entry.digest] = (where, entry)
        if entry.name is not None:
            by_name[entry.name] = where
    return {digest: entry for digest, (_, entry) in by_digest.items()}


def caller_of(entry: TokenEntry, *, app_erase: bool) -> Caller:
    actions = ROLE_ACTIONS[entry.role]
    if entry.role == "app" and not app_erase:
        actions = actions - {"erase"}
    return Caller(entry.tenant_id, entry.role, entry.token_id, actions)
