"""What a ``convlog rebuild`` and its worker processes agree on, in one module below both.

The words on a worker's pipes (:data:`READY` on stdout once it can project, :data:`RETRIABLE` its
exit code for a retriable error) and how every process of a rebuild builds the store it writes
with (:func:`load_counter`, :func:`make_store`) and stops at a poison record (:func:`poison_stop`).
The command (:mod:`convlog.ops.rebuilding`), the partition handing (:mod:`convlog.ops.rebuild_sharing`),
the forked worker (:mod:`convlog.ops.forked`) and the worker itself (:mod:`convlog.ops.rebuild_worker`)
import it; it imports none of them, so they form no cycle.
"""

from __future__ import annotations

import asyncio

from convlog.resources import keyed_codec
from convlog.settings import Settings
from events.sealing.ports import KeyRing
from pgstore import registry
from pgstore.pool import PgPool
from pgstore.store import PostgresProjectionStore
from projectors.errors import ProjectionError
from projectors.fold import PoisonRecordError
from projectors.tokens import TokenCounter

__all__ = ["READY", "RETRIABLE", "load_counter", "make_store", "poison_stop"]

READY = "convlog-rebuild-worker: ready"  # a worker's line on stdout once it can project
RETRIABLE = 75  # a worker's exit code for a retriable error (as the CLI's)


def poison_stop(e: PoisonRecordError) -> ProjectionError:
    return ProjectionError(f"{e}; a rebuild stops at poison records (--park-poison parks them instead)")


def load_counter(settings: Settings) -> asyncio.Task[TokenCounter]:
    """Load the tiktoken tables of the counted encodings (~0.25 s of CPU each) on a thread
    while Kafka and Postgres connect."""
    return asyncio.create_task(asyncio.to_thread(TokenCounter, encodings=settings.counted_encodings()))


async def make_store(
    settings: Settings,
    pool: PgPool,
    schema: str,
    counter: TokenCounter,
    *,
    park_poison: bool,
    keys: KeyRing | None = None,
) -> PostgresProjectionStore:
    """The store a rebuild writes ``schema`` with. Poison records an operator skipped in the live
    version are skipped here too (with the same reason): the log does not hold that decision,
    and without it the rebuild would stop there, or park the conversation, and differ."""
    inputs = await registry.store_inputs(pool, schema)  # the version's own window policy (a resumed one keeps its)
    return PostgresProjectionStore(
        pool,
        schema=schema,
        codec=keyed_codec(keys),
        counter=counter,
        policy=inputs.policy,
        max_event_bytes=settings.max_event_bytes,
        fail_fast=not park_poison,
        skips=inputs.skips,
        keys=keys,
    )
