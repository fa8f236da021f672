"""``CONVLOG_API_TOKENS``: its format, and its parsing into {token: tenant}."""

from __future__ import annotations

TOKENS_FORMAT = "tenant_a:token_a,tenant_b:token_b"


def parse_tokens(raw: str) -> dict[str, str]:
    """``"tenant_a:token_a,tenant_b:token_b"`` -> {token: tenant}. A token listed twice is
    refused (which tenant it authenticates would depend on the order), naming the entries and
    their tenants, never the token."""
    tokens: dict[str, str] = {}
    entries: dict[str, int] = {}  # token -> its entry's number, counted from 1
    for number, item in enumerate((item for item in raw.split(",") if item.strip()), start=1):
        tenant, sep, token = item.strip().partition(":")
        if not sep or not tenant or not token:
            raise ValueError(f"expected {TOKENS_FORMAT}")
        if token in tokens:
            raise ValueError(
                f"entries {entries[token]} (tenant {tokens[token]!r}) and {number} (tenant {tenant!r}) have the same "
                "token: a token belongs to one tenant"
            )
        tokens[token], entries[token] = tenant, number
    return tokens
