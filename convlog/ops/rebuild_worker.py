"""One worker process of ``convlog rebuild``: projects some partitions into a building version.

Started by :func:`convlog.ops.rebuild_sharing.build_sharing`, not by operators:
``python -m convlog.ops.rebuild_worker SCHEMA UNTIL [--batch-size N] [--park-poison]``, where
UNTIL is ``'{"partition": until_offset, ...}'``, or ``-``: then the worker starts (connections,
token tables, its store), prints :data:`~convlog.ops.rebuild_protocol.READY` on stdout and reads
that JSON as one line on stdin (an empty object or end of input: nothing to do). Settings come
from the same ``CONVLOG_*`` environment. Exit codes as the CLI's: 0 reached every ``until``,
130 stopped by SIGINT/SIGTERM (after its batch in flight), 2 / 75 a non-retriable / retriable
error, whose message is the last line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping, Sequence

from convlog.interruptible import INTERRUPTED, run_interruptibly
from convlog.ops.rebuild_protocol import READY, RETRIABLE, load_counter, make_store, poison_stop
from convlog.resources import opened_keys, ops_resources
from convlog.settings import Settings
from events.errors import ConvlogError
from projectors.fold import PoisonRecordError
from projectors.gc_tuning import projection_gc
from projectors.log_source import LogSource
from projectors.runner import Projector


async def work(settings: Settings, args: argparse.Namespace, stop: asyncio.Event) -> int:
    counter = load_counter(settings)
    async with (
        ops_resources(settings, name="convlog-rebuild-worker", migrated=True) as (pool, event_log),
        opened_keys(settings, read_only=True) as keys,
    ):
        store = await make_store(settings, pool, args.schema, await counter, park_poison=args.park_poison, keys=keys)
        text = args.until if args.until != "-" else await assignment(stop)
        if text is None:
            return INTERRUPTED
        until = {int(p): int(o) for p, o in json.loads(text or "{}").items()}
        if not until:
            return 0
        projector = Projector(LogSource(event_log, until), store, batch_size=args.batch_size, fetch_timeout_s=0.2)
        try:
            with projection_gc():
                await projector.run(stop, until=until)
        except PoisonRecordError as e:
            raise poison_stop(e) from e
        reached = await store.positions(sorted(until))
    return 0 if all(reached[p] >= o for p, o in until.items()) else INTERRUPTED


async def assignment(stop: asyncio.Event) -> str | None:
    """Say this worker is ready; its share, as sent on stdin ('' at its end); None on ``stop``."""
    sys.stdout.write(READY + "\n")
    sys.stdout.flush()
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        line = asyncio.create_task(reader.readline())
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({line, stopped}, return_when=asyncio.FIRST_COMPLETED)
        for task in (line, stopped):
            task.cancel()
        if stop.is_set() or not line.done() or line.cancelled():
            return None
        return line.result().decode().strip()
    finally:
        transport.close()


def main(argv: Sequence[str] | None = None, *, env: Mapping[str, str] | None = None) -> int:
    """The worker; its settings from ``env`` (default: this process's environment — a forked
    worker is handed the one a worker started afresh would have)."""
    parser = argparse.ArgumentParser(prog="convlog.ops.rebuild_worker")
    parser.add_argument("schema")
    parser.add_argument("until", help='JSON {"partition": offset to reach}, or - to read it from stdin once ready')
    parser.add_argument("--batch-size", type=int, default=5000)
    parser.add_argument("--park-poison", action="store_true")
    args = parser.parse_args(argv)
    try:
        return run_interruptibly(lambda stop: work(Settings.from_env(env), args, stop))
    except ConvlogError as e:
        sys.stderr.write(f"{e}\n")
        return RETRIABLE if e.retriable else 2


if __name__ == "__main__":
    sys.exit(main())
