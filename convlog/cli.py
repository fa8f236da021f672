"""The ``convlog`` command line. Later features add subcommands here."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from convlog.logs import configure_logging
from convlog.settings import Settings
from events.errors import ConvlogError
from events.keys import ConversationKey


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="convlog", description="Event-sourced conversation log for LLM apps.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="append the demo conversations and print the stored events")
    sub.add_parser("migrate", help="apply the Postgres migrations (schema convlog)")
    sub.add_parser("project", help="run the read-model projector until interrupted")
    sub.add_parser("serve", help="run the HTTP API and the projector (CONVLOG_HTTP_HOST/PORT, CONVLOG_API_TOKENS)")
    events = sub.add_parser("events", help="print a conversation's stored events")
    events.add_argument("key", help="conversation key tenant:user:conversation (':' and '\\' escaped with '\\')")
    return parser


async def _print_events(settings: Settings, key: ConversationKey) -> None:
    from convlog.render import print_conversation_events  # noqa: PLC0415 - keep `--help` fast
    from convlog.wiring import open_event_log  # noqa: PLC0415

    event_log = await open_event_log(settings)
    try:
        await print_conversation_events(event_log, key)
    finally:
        await event_log.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    configure_logging(default_level="warning")  # commands print their results; logs are for trouble
    try:
        settings = Settings.from_env()
        if args.command == "demo":
            from convlog.demo import main as demo_main  # noqa: PLC0415

            demo_main(settings)
        elif args.command == "migrate":
            from convlog.embedded_pg import database_url  # noqa: PLC0415
            from projectors.migrate import migrate_command  # noqa: PLC0415

            return asyncio.run(migrate_command(database_url(settings)))
        elif args.command == "project":
            from convlog.projecting import main as project_main  # noqa: PLC0415

            configure_logging(default_level="info")
            project_main(settings)
        elif args.command == "serve":
            from convlog.serve import main as serve_main  # noqa: PLC0415

            configure_logging(default_level="info")
            serve_main(settings)
        elif args.command == "events":
            asyncio.run(_print_events(settings, ConversationKey.parse(args.key)))
    except ConvlogError as e:
        print(f"convlog: error: {e}", file=sys.stderr)
        return 2 if not e.retriable else 75  # 75 = EX_TEMPFAIL: worth retrying
    return 0


if __name__ == "__main__":
    sys.exit(main())
