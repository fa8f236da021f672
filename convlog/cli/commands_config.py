"""``convlog config``: the effective configuration, and where each value came from."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from convlog.settings import Settings, describe, unknown_variables


def register(sub: Any) -> None:
    config = sub.add_parser(
        "config", help="print the effective configuration and where each value came from (secrets masked)"
    )
    config.add_argument("--json", action="store_true", help="one JSON object per setting, one a line")
    config.set_defaults(handler=_config)


def _config(settings: Settings, args: argparse.Namespace) -> int:
    lines = describe(settings)
    for var in unknown_variables():
        print(f"convlog config: {var} is not a convlog setting (ignored)", file=sys.stderr)
    if args.json:
        for line in lines:
            print(json.dumps(asdict(line), ensure_ascii=False))
        return 0
    width = max(len(line.variable) for line in lines)
    value_width = min(40, max(len(line.value) for line in lines))
    for line in lines:
        print(f"{line.variable:<{width}}  {line.value:<{value_width}}  {line.source}")
    return 0
