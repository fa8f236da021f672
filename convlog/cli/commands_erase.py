"""``convlog erase --tenant T --user U [--conversation C]``: an operator's erasure (GDPR art. 17),
keys destroyed first, then the erase events (docs/erasure.md). The work is in
:mod:`convlog.ops.erasure`; this parses, asks, and prints.

Exit codes: 0 erased (or erased already: a no-op), 1 nothing is known of the subject, 2 refused
(no ``--yes`` and no terminal to ask on, the answer was no, or the embedded log is held by a
running ``convlog serve``).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from pathlib import Path
from typing import Any

from convlog.settings import Settings

DEFAULT_REASON = "erased by an operator (convlog erase)"


def register(sub: Any) -> None:
    erase = sub.add_parser(
        "erase",
        help="erase a user (every conversation) or one conversation: keys destroyed first (docs/erasure.md)",
    )
    erase.add_argument("--tenant", required=True, help="the tenant id")
    erase.add_argument("--user", required=True, help="the user id")
    erase.add_argument("--conversation", metavar="ID", help="only this conversation; the user's others stay")
    erase.add_argument(
        "--reason", default=DEFAULT_REASON, metavar="TEXT", help="recorded with the erasure (no personal data)"
    )
    erase.add_argument(
        "--by", metavar="WHO", help="who asked, recorded as the erasure's requested_by (default: the OS user)"
    )
    erase.add_argument("--yes", action="store_true", help="do not ask (needed when stdin is not a terminal)")
    erase.add_argument(
        "--metrics-file",
        type=Path,
        metavar="PATH",
        help="add this run's counts to a Prometheus text file (node_exporter's textfile collector)",
    )
    erase.set_defaults(handler=_erase)


def _erase(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.ops.erasure import (  # noqa: PLC0415 - keep `--help` fast
        Subject,
        Survey,
        run_erase,
        textfile_metrics,
        write_textfile_metrics,
    )

    subject = Subject(args.tenant, args.user, args.conversation)
    refused: list[str] = []

    def confirm(found: Survey) -> bool:
        print("\n".join(found.plan()))
        if args.yes:
            return True
        if not sys.stdin.isatty():
            refused.append("not erasing without --yes: stdin is not a terminal to ask on")
            return False
        if input("erase? [y/N] ").strip().lower() not in ("y", "yes"):
            refused.append("not erased: the answer was no")
            return False
        return True

    registry, metrics = textfile_metrics(args.metrics_file) if args.metrics_file else (None, None)
    found, report = asyncio.run(
        run_erase(
            settings, subject, reason=args.reason, requested_by=args.by or _os_user(), confirm=confirm, metrics=metrics
        )
    )
    if not found.known:
        known = "no key, no read-model row"
        print(f"convlog: no such {subject.kind}: nothing is known of {subject} ({known})", file=sys.stderr)
        return 1
    if report is None:
        print(f"convlog: {refused[0] if refused else 'not erased'}", file=sys.stderr)
        return 2
    print("\n".join(report.lines()))
    if registry is not None:
        write_textfile_metrics(args.metrics_file, registry)
    return 0


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a container's uid)
        return "unknown-operator"
