"""Subcommands that run convlog: demo, migrate, project, serve, events."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from convlog.runtime.logs import configure_logging
from convlog.settings import Settings
from events.keys import ConversationKey

KEY_HELP = "conversation key tenant:user:conversation (':' and '\\' inside a part escaped with '\\')"


def register(sub: Any) -> None:
    sub.add_parser("demo", help="append the demo conversations and print the stored events").set_defaults(handler=_demo)
    sub.add_parser("migrate", help="apply the Postgres migrations (schema convlog)").set_defaults(handler=_migrate)
    sub.add_parser("project", help="run the read-model projector until interrupted").set_defaults(handler=_project)
    serve = sub.add_parser(
        "serve", help="run the HTTP API, the projector and the summarizer (CONVLOG_HTTP_HOST/PORT, CONVLOG_API_TOKENS)"
    )
    # Flags for the settings (a deployment's command line says the instance's role at a glance).
    serve.add_argument(
        "--no-projector",
        action="store_true",
        help="run no projector: an API-only instance (Kafka only; run `convlog project` apart); CONVLOG_PROJECTOR=off",
    )
    serve.add_argument(
        "--no-summarizer",
        action="store_true",
        help="run no summarizer (run `convlog summarize` apart); CONVLOG_SUMMARIZER=off",
    )
    serve.set_defaults(handler=_serve)
    sub.add_parser(
        "summarize", help="run the summarizer consumer until interrupted (Kafka; CONVLOG_LLM_BASE_URL or offline)"
    ).set_defaults(handler=_summarize)
    events = sub.add_parser("events", help="print a conversation's stored events")
    events.add_argument("key", help=KEY_HELP)
    events.set_defaults(handler=_events)


def _demo(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.demo.run import main as demo_main  # noqa: PLC0415 - keep `--help` fast

    demo_main(settings)
    return 0


def _migrate(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.resources import database_url  # noqa: PLC0415
    from pgstore.migrate import migrate_command  # noqa: PLC0415

    return asyncio.run(migrate_command(database_url(settings), legacy_window=settings.legacy_window_policy()))


def _project(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.runtime.projecting import main as project_main  # noqa: PLC0415

    configure_logging(settings, default_level="info")
    return project_main(settings)


def _summarize(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.runtime.summarizing import main as summarize_main  # noqa: PLC0415

    configure_logging(settings, default_level="info")
    return summarize_main(settings)


def _serve(settings: Settings, args: argparse.Namespace) -> int:
    from convlog.runtime.serve import main as serve_main  # noqa: PLC0415

    configure_logging(settings, default_level="info")
    off = {role: "off" for role in ("projector", "summarizer") if getattr(args, f"no_{role}")}
    serve_main(settings.model_copy(update=off) if off else settings)
    return 0


def _events(settings: Settings, args: argparse.Namespace) -> int:
    asyncio.run(_print_events(settings, ConversationKey.parse(args.key)))
    return 0


async def _print_events(settings: Settings, key: ConversationKey) -> None:
    from convlog.render import print_conversation_events  # noqa: PLC0415
    from convlog.resources import keyed_codec, opened_keys, opened_log  # noqa: PLC0415

    # Read-only, like replay and tail: the embedded log has one writer, usually `convlog serve`.
    async with opened_log(settings, read_only=True) as event_log, opened_keys(settings, read_only=True) as keys:
        await print_conversation_events(event_log, key, codec=keyed_codec(keys))
