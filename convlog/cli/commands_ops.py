"""Operators' subcommands: replay, tail, positions, dead-letters, export, retention, members.

Argument parsing and printing only; the work is in :mod:`convlog.ops`.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from convlog.cli.commands_core import KEY_HELP
from convlog.settings import Settings
from events.keys import ConversationKey
from query_api.context_types import REASONING_POLICIES


def register(sub: Any) -> None:
    """The operators' subcommands, in the order ``convlog --help`` lists them."""
    _add_replay(sub)
    _add_tail(sub)
    _add_positions(sub)
    _add_dead_letters(sub)
    _add_export(sub)
    _add_retention(sub)
    _add_members(sub)


def _add_replay(sub: Any) -> None:
    replay = sub.add_parser(
        "replay", help="print a conversation's events and the context served as of an offset (the API's as_of path)"
    )
    replay.add_argument("key", help=KEY_HELP)
    point = replay.add_mutually_exclusive_group()
    point.add_argument(
        "--as-of", type=_offset, metavar="OFFSET", help="log offset of one of its events (default: its last event)"
    )
    point.add_argument(
        "--before-message",
        metavar="MESSAGE_ID",
        help="right before this message was appended (an answer: the context that produced it)",
    )
    replay.add_argument("--model", default="gpt-4o", help="model the context is counted for (default gpt-4o)")
    replay.add_argument("--budget-tokens", type=_positive, default=128_000, metavar="N", help="default 128000")
    replay.add_argument("--reserve-tokens", type=_offset, default=0, metavar="N", help="kept free for the answer")
    replay.add_argument("--reasoning", choices=REASONING_POLICIES, default="omit")
    replay.add_argument(
        "--editing",
        metavar="QUERY",
        help="context editing, as the context route's parameters (default: CONVLOG_CONTEXT_EDITING; '' for none)",
    )
    replay.add_argument(
        "--read-models-version",
        type=_positive,
        metavar="N",
        help="with version N's window (a context's Convlog-Read-Models-Version header)",
    )
    replay.set_defaults(handler=_replay)


def _add_tail(sub: Any) -> None:
    tail = sub.add_parser("tail", help="follow a conversation's events live (Ctrl-C stops)")
    tail.add_argument("key", help=KEY_HELP)
    tail.add_argument("--from-start", action="store_true", help="print its whole history first")
    tail.set_defaults(handler=_tail)


def _add_positions(sub: Any) -> None:
    positions = sub.add_parser(
        "positions", help="per projection version / summarizer consumer and partition: position, log end, lag"
    )
    positions.set_defaults(handler=_positions)


def _add_dead_letters(sub: Any) -> None:
    letters = sub.add_parser("dead-letters", help="inspect, release or skip records the projection parked")
    actions = letters.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="dead letters of the live version (default: the parked ones)")
    listing.add_argument("--status", choices=("parked", "released", "skipped", "all"), default="parked")
    show = actions.add_parser("show", help="one dead letter: coordinates, error, record decoded or as hex")
    release = actions.add_parser("release", help="apply it again after a fix; the held records follow in order")
    skip = actions.add_parser("skip", help="give up on it (the reason is recorded); the held records apply")
    for parser in (show, release, skip):
        parser.add_argument("id", type=_positive, help="dead letter id (see `dead-letters list`)")
    skip.add_argument("--reason", required=True, help="why it is skipped; stored with the dead letter")
    letters.set_defaults(handler=_dead_letters)


def _add_export(sub: Any) -> None:
    export = sub.add_parser("export", help="audit export of transcripts with event coordinates, streamed")
    export.add_argument("--tenant", required=True)
    export.add_argument("--user")
    export.add_argument("--since", type=_timestamp, metavar="TS", help="ISO 8601, inclusive (no zone: UTC)")
    export.add_argument("--until", type=_timestamp, metavar="TS", help="ISO 8601, exclusive (no zone: UTC)")
    export.add_argument("--format", choices=("jsonl",), required=True)
    export.add_argument("--output", "-o", type=Path, metavar="PATH", help="write here instead of stdout")
    export.set_defaults(handler=_export)


def _add_retention(sub: Any) -> None:
    retention = sub.add_parser("retention", help="archive, then erase, conversations idle for more than N days")
    retention.add_argument("--idle-days", type=_positive, required=True, metavar="N")
    retention.add_argument(
        "--archive",
        type=Path,
        metavar="PATH",
        help="archive file, or a directory for a timestamped one in it (default: DATA_DIR/retention)",
    )
    retention.add_argument("--dry-run", action="store_true", help="list what would be erased; change nothing")
    retention.add_argument(
        "--wait",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for the projection to catch up first (default 60)",
    )
    retention.set_defaults(handler=_retention)


def _add_members(sub: Any) -> None:
    members = sub.add_parser("members", help="the Kafka consumer group members of the projector or the summarizer")
    member_actions = members.add_subparsers(dest="action", required=True, metavar="ACTION")
    remove = member_actions.add_parser(
        "remove",
        help="remove static members stopped for good: their partitions move at once, not after the session timeout",
    )
    listed = member_actions.add_parser("list", help="the group's members: instance ids, hosts, partitions")
    listed.add_argument("role", choices=("projector", "summarizer"))
    remove.add_argument("role", choices=("projector", "summarizer"))
    remove.add_argument(
        "instance_id",
        nargs="+",
        metavar="INSTANCE_ID",
        help="the member's CONVLOG_PROJECTOR_INSTANCE_ID / CONVLOG_SUMMARIZER_INSTANCE_ID",
    )
    members.set_defaults(handler=_members)


def _members(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.ops.groups import list_members, remove_members, render_members  # noqa: PLC0415

    if args.action == "list":
        print(render_members(asyncio.run(list_members(settings, args.role))))
        return 0
    removal = asyncio.run(remove_members(settings, args.role, args.instance_id))
    print("\n".join(removal.lines()))
    return 0 if removal.all_removed else 1


def _offset(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _timestamp(text: str) -> Any:
    from convlog.jobs.export import parse_timestamp  # noqa: PLC0415 - keep `--help` fast

    try:
        return parse_timestamp(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _replay(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.ops.replay import first_offset, replay  # noqa: PLC0415
    from convlog.resources import keyed_codec, live_read_models, opened_keys, opened_log  # noqa: PLC0415
    from events.errors import InvalidRequestError  # noqa: PLC0415
    from pgstore.registry import served_policy  # noqa: PLC0415
    from pgstore.versions import served_policies  # noqa: PLC0415
    from projectors.window import WindowPolicy  # noqa: PLC0415
    from query_api.as_of import BeforeMessage, PolicyAt  # noqa: PLC0415
    from query_api.context_editing import policy_from_query  # noqa: PLC0415
    from query_api.context_types import ContextRequest  # noqa: PLC0415

    key = ConversationKey.parse(args.key)
    editing = policy_from_query(settings.context_editing if args.editing is None else args.editing)
    request = ContextRequest(
        args.model,
        args.budget_tokens,
        args.reserve_tokens,
        0,
        args.reasoning,
        settings.window_image_turns,
        editing=editing,
    )

    async def run() -> None:
        async with (
            live_read_models(settings) as handle,
            opened_log(settings, read_only=True) as event_log,
            opened_keys(settings, read_only=True) as keys,
        ):
            start = await first_offset(handle, key)
            point = BeforeMessage(args.before_message) if args.before_message is not None else args.as_of
            policy: WindowPolicy | PolicyAt | None = served_policies(handle.pool, handle.live.policy)
            if args.read_models_version is not None:
                policy = await served_policy(handle.pool, args.read_models_version)
                if policy is None:
                    raise InvalidRequestError(f"read-models version {args.read_models_version} never served contexts")
            assert policy is not None
            await replay(
                event_log,
                key,
                as_of=point,
                start_offset=start or 0,
                request=request,
                max_event_bytes=settings.max_event_bytes,
                policy=policy,
                default_encoding=settings.default_encoding,
                counted=settings.counted_encodings(),
                codec=keyed_codec(keys),
            )

    asyncio.run(run())
    return 0


def _tail(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.ops.replay import first_offset, follow  # noqa: PLC0415
    from convlog.resources import keyed_codec, live_read_models, opened_keys, opened_log  # noqa: PLC0415

    key = ConversationKey.parse(args.key)

    def out(line: str) -> None:
        print(line, flush=True)

    async def run() -> None:
        start = None
        if args.from_start:
            async with live_read_models(settings) as handle:
                start = await first_offset(handle, key) or 0
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        async with opened_log(settings, read_only=True) as event_log, opened_keys(settings, read_only=True) as keys:
            await follow(event_log, key, start_offset=start, stop=stop, out=out, codec=keyed_codec(keys))

    asyncio.run(run())  # Ctrl-C: the front door prints "interrupted" and exits 130
    return 0


def _positions(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.ops.positions import collect_positions, render_positions, window_lines  # noqa: PLC0415
    from convlog.resources import opened_log, opened_pool  # noqa: PLC0415

    async def run() -> str:
        async with opened_pool(settings, migrated=False) as pool, opened_log(settings, read_only=True) as event_log:
            table = render_positions(await collect_positions(pool, event_log))
            return table + "\n\n" + "\n".join(await window_lines(pool, settings.window_policy()))

    print(asyncio.run(run()))
    return 0


def _dead_letters(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.ops import dead_letters as ops  # noqa: PLC0415
    from convlog.resources import live_read_models, opened_keys  # noqa: PLC0415

    async def run() -> str:
        async with live_read_models(settings) as handle, opened_keys(settings, read_only=True) as keys:
            if args.action == "list":
                status = None if args.status == "all" else args.status
                return ops.render_list(await ops.list_dead_letters(handle.pool, handle.schema, status=status))
            if args.action == "show":
                return await ops.show_dead_letter(handle.pool, handle.schema, args.id)
            skip_reason = args.reason if args.action == "skip" else None
            store = ops.store_for(handle.pool, handle.schema, settings, policy=handle.live.policy, keys=keys)
            report = await ops.resolve(store, args.id, skip_reason=skip_reason)
            verb = "skipped" if skip_reason is not None else "released"
            return ops.describe_report(report, verb=verb, dead_letter_id=args.id)

    print(asyncio.run(run()))
    return 0


def _export(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.jobs.export import ExportFilter, export_transcripts  # noqa: PLC0415
    from convlog.resources import live_read_models, opened_keys  # noqa: PLC0415
    from events.errors import ConfigurationError  # noqa: PLC0415

    where = ExportFilter(tenant=args.tenant, user=args.user, since=args.since, until=args.until)

    async def run() -> int:
        async with live_read_models(settings) as handle, opened_keys(settings, read_only=True) as keys:
            if args.output is None:
                return await export_transcripts(handle.pool, handle.schema, where, sys.stdout, keys=keys)
            # Written beside the target and renamed into place when complete: a failed or
            # interrupted export never leaves a file that looks like a whole one.
            partial = args.output.with_name(args.output.name + ".partial")
            try:
                out = partial.open("w", encoding="utf-8")
            except OSError as e:
                raise ConfigurationError(f"cannot write {args.output}: {e.strerror}") from e
            try:
                with out:
                    written = await export_transcripts(handle.pool, handle.schema, where, out, keys=keys)
                partial.replace(args.output)
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
            return written

    written = asyncio.run(run())
    print(f"exported {written} message(s)", file=sys.stderr)
    return 0


def _retention(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.jobs.retention import run_retention  # noqa: PLC0415
    from convlog.resources import live_read_models, opened_log  # noqa: PLC0415
    from convlog.wiring import make_producer  # noqa: PLC0415

    archive = args.archive or settings.data_dir / "retention"
    if args.archive is None and not args.dry_run:
        archive.mkdir(parents=True, exist_ok=True)

    async def run() -> int:
        async with live_read_models(settings) as handle, opened_log(settings) as event_log:
            producer = make_producer(event_log, settings, producer="convlog-retention")
            report = await run_retention(
                handle.pool,
                handle.schema,
                event_log,
                producer,
                idle_days=args.idle_days,
                archive=archive,
                dry_run=args.dry_run,
                wait_s=args.wait,
            )
        for c in report.idle:
            if c.key not in report.woke:
                verb = "would erase" if args.dry_run else "erased"
                print(f"{verb}  {c.key}  (last event {c.last_event_at.isoformat()})")
        if args.dry_run:
            print(
                f"dry run: {len(report.idle)} conversation(s) idle for more than {args.idle_days} days; nothing changed"
            )
        elif report.archive is None:
            print(f"no conversation idle for more than {args.idle_days} days")
        else:
            print(
                f"archived {report.archived_messages} message(s) of {len(report.idle)} conversation(s) "
                f"to {report.archive}; erased {report.erased}"
            )
            for key in report.woke:
                print(f"not erased  {key}  (written to during the run: no longer idle)")
        return 0

    return asyncio.run(run())
