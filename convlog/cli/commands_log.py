"""Operators' subcommands for what convlog keeps on this machine: ``log check|repair`` (the
embedded log file) and ``stop`` (the embedded Postgres that ``serve`` / ``demo`` leave running)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from convlog.settings import Settings


def register(sub: Any) -> None:
    log = sub.add_parser("log", help="check or repair the embedded log file (docs/operating.md: When things go wrong)")
    actions = log.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = actions.add_parser("check", help="records, partitions and any damage; exit code 1 when damaged")
    repair = actions.add_parser(
        "repair", help="move damaged frames aside into a side file next to the log; later records keep their offsets"
    )
    repair.add_argument(
        "--renumber",
        action="store_true",
        help="also remove damage that hides which records it held (later offsets change: rebuild the read models)",
    )
    for parser in (check, repair):
        parser.add_argument("--path", type=Path, help="the log file (default: the embedded log in CONVLOG_DATA_DIR)")
    log.set_defaults(handler=_log)

    stop = sub.add_parser("stop", help="stop the embedded Postgres convlog started in CONVLOG_DATA_DIR (data is kept)")
    stop.add_argument("--force", action="store_true", help="even while a convlog process holds the embedded log")
    stop.set_defaults(handler=_stop)


def _log(settings: Settings, args: argparse.Namespace) -> int:
    from events.embedded_log_repair import check_log, repair_log  # noqa: PLC0415 - keep `--help` fast

    path: Path = args.path or settings.embedded_log_path
    if args.action == "check":
        report = check_log(path)
        print("\n".join(report.lines()))
        return 0 if report.healthy else 1
    repaired = repair_log(path, renumber=args.renumber)
    if repaired.side_file is None:
        print(f"{path}: nothing to repair")
        return 0
    for damaged in repaired.moved:
        print(f"moved aside {damaged.describe()}")
    if repaired.torn_bytes:
        print(f"moved aside a torn tail of {repaired.torn_bytes} bytes (never acknowledged)")
    print(f"damaged bytes are in {repaired.side_file}; {repaired.holes} hole(s) keep their offsets taken")
    if repaired.renumbered:
        print(
            "later records of the damaged partitions have new offsets: rebuild the read models now "
            "(`convlog rebuild read_models --new --switch`) before `convlog serve` takes appends"
        )
    return 0


def _stop(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.embedded.postgres import embedded_postgres_dir, stop_embedded_postgres  # noqa: PLC0415
    from events.embedded_log_repair import log_in_use  # noqa: PLC0415

    if not args.force and log_in_use(settings.embedded_log_path):
        print(
            f"convlog: a convlog process (serve, project or demo) still holds {settings.embedded_log_path}: "
            "stop it first, or pass --force"
        )
        return 2
    where = embedded_postgres_dir(settings.data_dir)
    if stop_embedded_postgres(settings.data_dir):
        print(f"stopped the embedded Postgres in {where} (its data is kept for the next start)")
    else:
        print(f"the embedded Postgres in {where} is not running")
    return 0
