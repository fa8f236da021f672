"""The ``convlog`` command line: a thin front door over one module per command group.

Each command module exposes ``register(subparsers)``, which adds its subcommands and sets
``handler`` on each: ``handler(settings, args) -> exit code``. Heavy imports stay inside the
handlers so that ``convlog --help`` is fast.

Exit codes: 0 success, 1 a check found a difference (``verify``), 2 an error that retrying
will not fix (bad input, bad configuration), 75 (EX_TEMPFAIL) an error worth retrying
(Kafka or Postgres unavailable), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from convlog.cli import (
    commands_config,
    commands_core,
    commands_erase,
    commands_keys,
    commands_log,
    commands_ops,
    commands_rebuild,
    commands_tokens,
)
from convlog.runtime.logs import configure_logging
from convlog.settings import Settings
from events.errors import ConvlogError

# Command modules, in the order their subcommands appear in --help.
COMMAND_MODULES = (
    commands_core,
    commands_ops,
    commands_erase,
    commands_rebuild,
    commands_log,
    commands_keys,
    commands_tokens,
    commands_config,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="convlog", description="Event-sourced conversation log for LLM apps.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()  # a bad value stops every command here, before it does anything
        configure_logging(settings, default_level="warning")  # commands print their results; logs are for trouble
        code: int = args.handler(settings, args)
    except ConvlogError as e:
        print(f"convlog: error: {e}", file=sys.stderr)
        return 2 if not e.retriable else 75  # 75 = EX_TEMPFAIL: worth retrying
    except KeyboardInterrupt:
        print("convlog: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
