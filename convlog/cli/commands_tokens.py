"""``convlog tokens hash|new``: the entries of a token file (``CONVLOG_API_TOKENS_FILE``).

``hash`` reads a token from stdin (never an argument: it would be in the shell's history and in
``ps``) and prints its ``sha256:<hex>``; ``new`` makes a random token (256 bits) and prints it
once, with the ``[[tokens]]`` entry that lists its hash.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from typing import Any

from convlog.settings import Settings
from query_api.auth import ROLES, token_hash


def register(sub: Any) -> None:
    tokens = sub.add_parser("tokens", help="API tokens for CONVLOG_API_TOKENS_FILE: hash one, make one")
    actions = tokens.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("hash", help="print sha256:<hex> of the token read from stdin (one line)")
    new = actions.add_parser("new", help="make a random token; print it and its [[tokens]] entry")
    new.add_argument("--tenant", required=True, help="the tenant the token belongs to")
    new.add_argument("--role", choices=ROLES, default="app", help="what it may do (default: app)")
    new.add_argument("--id", dest="token_id", help="its name in logs and audit records")
    tokens.set_defaults(handler=_tokens)


def _tokens(_: Settings, args: argparse.Namespace) -> int:
    if args.action == "hash":
        token = sys.stdin.readline().rstrip("\r\n")
        if not token:
            print("convlog: expected a token on stdin", file=sys.stderr)
            return 2
        print(token_hash(token))
        return 0
    token = secrets.token_urlsafe(32)
    print(f"# the token (shown once; the file keeps only its hash): {token}")
    print("[[tokens]]")
    if args.token_id:
        print(f"id = {json.dumps(args.token_id)}")
    print(f"tenant = {json.dumps(args.tenant)}")
    print(f'role = "{args.role}"')
    print(f'hash = "{token_hash(token)}"')
    return 0
