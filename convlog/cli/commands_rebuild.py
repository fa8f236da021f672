"""Subcommands for projection versions: rebuild, verify, drop (logic in convlog.ops.rebuilding / verifying)."""

from __future__ import annotations

import argparse
from typing import Any

from convlog.settings import Settings


def _positive(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def register(sub: Any) -> None:
    rebuild = sub.add_parser(
        "rebuild",
        help="build a new version of a projection from offset 0 beside the live one (blue/green)",
        description="Build a version of PROJECTION from offset 0 beside the live one, without disturbing the live "
        "projector. Ctrl-C stops after the batch in flight; run the same command again to resume. Without "
        "--version the latest unfinished version is resumed, else a new one is created.",
    )
    rebuild.add_argument("projection", metavar="PROJECTION", help="the projection to rebuild: read_models")
    which = rebuild.add_mutually_exclusive_group()
    which.add_argument("--version", type=_positive, help="resume (or switch to) this building version")
    which.add_argument("--new", action="store_true", help="start a new version even if one is unfinished")
    rebuild.add_argument(
        "--verify", action="store_true", help="compare it with the live version per table and conversation"
    )
    rebuild.add_argument("--switch", action="store_true", help="then make it live atomically (the old one is kept)")
    rebuild.add_argument("--park-poison", action="store_true", help="park poison records instead of stopping at one")
    rebuild.add_argument("--batch-size", type=_positive, default=5000, help="records per transaction (default 5000)")
    rebuild.add_argument(
        "--workers",
        type=_positive,
        help="processes building partitions side by side (Kafka only; default: one per 50k records, up to the CPUs "
        "and 4)",
    )
    rebuild.set_defaults(handler=_rebuild)

    verify = sub.add_parser(
        "verify",
        help="check the live read models against a fresh replay of the log (exit 1 on a difference)",
        description="Replay the log into a scratch schema, up to the live version's positions, and compare "
        "checksums per table and conversation; exit 1 naming the first differing conversation and row.",
    )
    scope = verify.add_mutually_exclusive_group()
    scope.add_argument("--sample", type=_positive, default=1000, help="random conversations to check (default 1000)")
    scope.add_argument("--all", action="store_true", help="check every conversation")
    verify.add_argument("--batch-size", type=_positive, default=5000, help="records read at a time (default 5000)")
    verify.set_defaults(handler=_verify)

    drop = sub.add_parser("drop", help="remove a retired (or abandoned building) version of a projection")
    drop.add_argument("projection", metavar="PROJECTION", help="the projection: read_models")
    drop.add_argument("--version", type=_positive, required=True, help="the version to drop (never the live one)")
    drop.set_defaults(handler=_drop)


def _rebuild(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.interruptible import run_interruptibly  # noqa: PLC0415 - keep `--help` fast
    from convlog.ops.rebuilding import RebuildOptions, rebuild  # noqa: PLC0415

    opts = RebuildOptions(
        projection=args.projection,
        version=args.version,
        new=args.new,
        verify=args.verify,
        switch=args.switch,
        park_poison=args.park_poison,
        batch_size=args.batch_size,
        workers=args.workers,
    )
    return run_interruptibly(lambda stop: rebuild(settings, opts, stop))


def _verify(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.interruptible import run_interruptibly  # noqa: PLC0415
    from convlog.ops.verifying import verify  # noqa: PLC0415

    sample = None if args.all else args.sample
    return run_interruptibly(lambda stop: verify(settings, sample=sample, batch_size=args.batch_size, stop=stop))


def _drop(settings: Settings, args: argparse.Namespace) -> int:
    import asyncio  # noqa: PLC0415

    from convlog.ops.rebuilding import drop  # noqa: PLC0415

    return asyncio.run(drop(settings, args.projection, args.version))
