"""``convlog keys list|show|rotate``: the key store as an operator sees it — which keys exist,
for whom, which erasure destroyed which (never a key's bytes) — and rotating the local KEK."""

from __future__ import annotations

import argparse
import asyncio
import json
from datetime import datetime
from typing import Any

from convlog.settings import Settings
from events.sealing.keys import KeyInfo

COLUMNS = ("key id", "kind", "tenant", "user", "conversation", "created", "destroyed", "by", "reason")


def register(sub: Any) -> None:
    keys = sub.add_parser("keys", help="the data keys of crypto-shredding: list, show, rotate (docs/erasure.md)")
    actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="every key, live or destroyed, without its bytes")
    listing.add_argument("--json", action="store_true", help="one JSON object per key, one a line")
    show = actions.add_parser("show", help="one key, without its bytes")
    show.add_argument("key_id", help="a key id (uk_... or ck_...)")
    rotate = actions.add_parser(
        "rotate", help="a new local KEK (the master key file), then every live user key rewrapped under it"
    )
    rotate.add_argument(
        "--retire",
        action="store_true",
        help="then drop the earlier KEKs no user key needs any more (stop every other convlog process first)",
    )
    keys.set_defaults(handler=_keys)


def _keys(settings: Settings, args: argparse.Namespace) -> int:
    if args.action == "rotate":
        return asyncio.run(_rotate(settings, retire=args.retire))
    infos = asyncio.run(_infos(settings))
    if args.action == "show":
        found = [i for i in infos if i.key_id == args.key_id]
        if not found:
            print(f"convlog: no key {args.key_id}")
            return 2
        for name, value in as_json(found[0]).items():
            print(f"{name:<15} {'' if value is None else value}")
        return 0
    if args.json:
        for info in infos:
            print(json.dumps(as_json(info), ensure_ascii=False))
        return 0
    print(table([_row(i) for i in infos]))
    return 0


async def _infos(settings: Settings) -> list[KeyInfo]:
    from convlog.wiring import open_key_store  # noqa: PLC0415 - keep `--help` fast

    store = await open_key_store(settings, read_only=True)
    try:
        return list(store.infos())
    finally:
        await store.close()


async def _rotate(settings: Settings, *, retire: bool) -> int:
    from convlog.wiring import open_key_store, open_key_wrapper  # noqa: PLC0415
    from events.sealing.local_kek import LocalMasterKey  # noqa: PLC0415

    wrapper = open_key_wrapper(settings)
    new_kek = wrapper.rotate() if isinstance(wrapper, LocalMasterKey) and settings.master_key is None else None
    store = await open_key_store(settings, wrapper=wrapper)
    try:
        count = await store.rotate(wrapper)
        in_use = {i.wrapped_by for i in store.infos() if i.kind == "user" and i.destroyed_at is None}
    finally:
        await store.close()
    print(f"{'new KEK ' + new_kek + '; ' if new_kek else ''}rewrapped {count} user key(s) under {wrapper.kek_id}")
    if retire and isinstance(wrapper, LocalMasterKey) and settings.master_key is None:
        retired = wrapper.retire(in_use)
        print(f"retired {len(retired)} earlier KEK(s){': ' + ', '.join(retired) if retired else ''}")
    return 0


def as_json(info: KeyInfo) -> dict[str, str | None]:
    return {
        "key_id": info.key_id,
        "kind": info.kind,
        "tenant_id": info.user.tenant_id,
        "user_id": info.user.user_id,
        "conversation_id": info.conversation.conversation_id if info.conversation else None,
        "created_at": info.created_at.isoformat(),
        "wrapped_by": info.wrapped_by,
        "destroyed_at": info.destroyed_at.isoformat() if info.destroyed_at else None,
        "requested_by": info.requested_by,
        "reason": info.reason,
    }


def _row(info: KeyInfo) -> tuple[str, ...]:
    return (
        info.key_id,
        info.kind,
        info.user.tenant_id,
        info.user.user_id,
        info.conversation.conversation_id if info.conversation else "",
        _when(info.created_at),
        _when(info.destroyed_at),
        info.requested_by or "",
        info.reason or "",
    )


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S") if at else ""


def table(rows: list[tuple[str, ...]]) -> str:
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [COLUMNS, *rows]]
    return "\n".join(lines)
