"""A rebuild with several worker processes: this process starts at once, the others join when ready.

A worker process costs time before it can project anything — forked from this process
(:mod:`convlog.ops.forked`), its connections and store; started afresh, most of a second of CPU
for imports and the tiktoken tables too — and this process has paid all of that already. So it
waits for forked workers only briefly (:data:`FORKED_READY_GRACE_S`: they are ready in tens of
milliseconds), handing each its share before it reads anything, and not at all for the others:
it projects every partition not handed over itself, and each worker that becomes ready later
(``ready`` on its stdout, once it has connected and built its store) is handed a share of the
partitions this process has not finished yet — about half of what is left with two workers.
Handing a partition over waits for the batch in flight on it (the projector's revoke), so the
worker resumes from the positions that batch stored: a partition is projected by one process
at a time, and the positions fence would refuse a batch of a second anyway. A worker that
becomes ready when too little is left gets nothing and exits; one still starting when this
process has finished is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from convlog.interruptible import INTERRUPTED
from convlog.ops.common import say
from convlog.ops.forked import CAN_FORK, fork_worker
from convlog.ops.rebuild_protocol import READY, RETRIABLE
from convlog.settings import Settings
from events.errors import ConvlogError
from events.log import EventLog
from projectors.log_source import LogSource
from projectors.ports import ProjectionStore
from projectors.runner import Projector

log = structlog.get_logger(__name__)

# How long this process waits for forked workers (ready in tens of milliseconds) before it starts
# projecting itself: their shares are then handed over before it reads anything.
FORKED_READY_GRACE_S = 1.0


class SharingSource(LogSource):
    """The log source of this process' own projector: its partitions can be handed over."""

    async def release(self, partitions: Collection[int]) -> None:
        """Stop reading ``partitions``; returns once no batch of theirs is in flight any more.
        Before the projector started, they are simply never read."""
        if self._partitions is not None:
            self._partitions -= frozenset(partitions)
        owned = frozenset(partitions) & self.assigned
        for p in owned:
            self._next.pop(p, None)
        if self._listener is not None and owned:
            # Twice: the batch in flight may commit and the next one, fetched before the first
            # call took the partitions away, start before this task runs again; the second call
            # waits for that one. After it no batch holds them (the projector dropped them).
            await self._listener.on_revoked(owned)
            await self._listener.on_revoked(owned)


class WorkerProcess(Protocol):
    """What a worker is to this process: an :class:`asyncio.subprocess.Process` (a worker started
    afresh) or a :class:`~convlog.ops.forked.ForkedWorker`."""

    @property
    def stdin(self) -> asyncio.StreamWriter | None: ...
    @property
    def stdout(self) -> asyncio.StreamReader | None: ...
    @property
    def stderr(self) -> asyncio.StreamReader | None: ...
    @property
    def returncode(self) -> int | None: ...
    async def wait(self) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...


@dataclass
class _Worker:
    proc: WorkerProcess
    handed: bool = False  # given a share (possibly empty): its exit code counts
    stderr: bytearray = field(default_factory=bytearray)

    @property
    def _pipes(self) -> tuple[asyncio.StreamWriter, asyncio.StreamReader, asyncio.StreamReader]:
        proc = self.proc
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        return proc.stdin, proc.stdout, proc.stderr

    async def wait_ready(self) -> bool:
        """Read the worker's stdout until it says it is ready (True) or closes it (False)."""
        while line := await self._pipes[1].readline():
            if line.decode(errors="replace").strip() == READY:
                return True
        return False

    async def keep_stderr(self) -> None:
        while chunk := await self._pipes[2].read(65536):
            self.stderr += chunk

    async def finish(self) -> None:
        """Read (and drop) the rest of its stdout until it exits: a full pipe would block it."""
        self._pipes[0].close()
        while await self._pipes[1].read(65536):
            pass
        await self.proc.wait()

    async def hand(self, share: Mapping[int, int]) -> None:
        """Give it ``share`` (partition -> offset to reach; empty: nothing, it exits)."""
        self.handed = True
        stdin = self._pipes[0]
        with contextlib.suppress(ConnectionError):  # it died meanwhile: its exit code says why
            stdin.write(json.dumps({str(p): o for p, o in share.items()}).encode() + b"\n")
            await stdin.drain()

    def failure(self, *, stopped: bool) -> ConvlogError | None:
        """Its error, if it failed with a share (a worker stopped before it had one failed nothing)."""
        code = self.proc.returncode
        if not self.handed or code in (0, None) or (code == INTERRUPTED and stopped):
            return None
        lines = self.stderr.decode(errors="replace").strip().splitlines()
        error = ConvlogError(lines[-1] if lines else f"a rebuild worker exited with {code}")
        error.retriable = code == RETRIABLE
        return error


async def build_sharing(
    settings: Settings,
    event_log: EventLog,
    store: ProjectionStore,
    todo: Mapping[int, int],
    *,
    workers: int,
    batch_size: int,
    park_poison: bool,
    stop: asyncio.Event,
) -> None:
    """Project ``todo`` (partition -> offset to reach) with this process and up to ``workers - 1``
    worker processes. Raises the first failure (this process' own, or a worker's); returns when
    every process stopped, with ``stop`` after its batch in flight."""
    flags = ["--batch-size", str(batch_size)] + (["--park-poison"] if park_poison else [])
    env = settings.subprocess_env()
    pool = [_Worker(await start_worker(store.schema, flags, env)) for _ in range(workers - 1)]
    grace_s = FORKED_READY_GRACE_S if CAN_FORK else 0.0
    await _Sharing(event_log, store, todo, pool, batch_size=batch_size, stop=stop, ready_grace_s=grace_s).run()


class _Sharing:
    def __init__(
        self,
        event_log: EventLog,
        store: ProjectionStore,
        todo: Mapping[int, int],
        pool: list[_Worker],
        *,
        batch_size: int,
        stop: asyncio.Event,
        ready_grace_s: float = 0.0,
    ) -> None:
        self._todo = todo
        self._ready_grace_s = ready_grace_s
        self._until = dict(todo)  # this process' partitions: its projector reads it live, hand-overs shrink it
        self._source = SharingSource(event_log, self._until)
        self._projector = Projector(self._source, store, batch_size=batch_size, fetch_timeout_s=0.2)
        self._pool = pool
        self._unserved = len(pool)  # workers not handed their share yet
        self._batch_size = batch_size
        self._stop = stop
        self._halt = asyncio.Event()  # the operator's stop, or a failure anywhere
        self._started = time.monotonic()

    async def run(self) -> None:
        keeping = [asyncio.create_task(w.keep_stderr()) for w in self._pool]
        readiness = [asyncio.create_task(w.wait_ready()) for w in self._pool]
        if readiness and self._ready_grace_s:
            # Forked workers are ready within tens of milliseconds: hand them their shares before
            # this process reads anything, instead of waiting for its first batch to commit.
            await asyncio.wait(readiness, timeout=self._ready_grace_s)
            for worker, ready in zip(self._pool, readiness, strict=True):
                if ready.done() and ready.result():
                    await worker.hand(await self._hand_over())
        own = asyncio.create_task(self._projector.run(self._halt, until=self._until))
        forwarding = asyncio.create_task(self._stop.wait())
        forwarding.add_done_callback(lambda _: self._halt.set())
        stopping = asyncio.create_task(self._stop_workers())
        serving = [
            asyncio.create_task(self._serve(w, own, r, k))
            for w, r, k in zip(self._pool, readiness, keeping, strict=True)
        ]
        try:
            await asyncio.gather(own, *serving)
        finally:
            self._halt.set()  # a failure anywhere stops the others, after their batch in flight
            await asyncio.gather(own, *serving, stopping, return_exceptions=True)
            forwarding.cancel()

    async def _stop_workers(self) -> None:
        """On the operator's stop or a failure: the workers with a share stop after their batch."""
        await self._halt.wait()
        for worker in self._pool:
            if worker.handed and worker.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.send_signal(signal.SIGINT)

    async def _serve(
        self, worker: _Worker, own: asyncio.Task[None], ready: asyncio.Task[bool], stderr: asyncio.Task[None]
    ) -> None:
        halted = asyncio.create_task(self._halt.wait())
        try:
            if not worker.handed:
                await asyncio.wait({ready, own, halted}, return_when=asyncio.FIRST_COMPLETED)
            if worker.handed:
                pass  # its share was handed before this process started projecting
            elif ready.done() and ready.result():
                wanted = not own.done() and not self._halt.is_set()
                await worker.hand(await self._hand_over() if wanted else {})  # {}: nothing left for it, it exits
                if self._halt.is_set() and worker.proc.returncode is None:  # came during the hand-over
                    with contextlib.suppress(ProcessLookupError):
                        worker.proc.send_signal(signal.SIGINT)
            elif worker.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()  # still starting, and no longer needed: it holds nothing yet
        finally:
            for task in (ready, halted):
                task.cancel()
            await asyncio.gather(ready, halted, return_exceptions=True)
            await worker.finish()
            await stderr
        if not worker.handed and worker.proc.returncode not in (0, -signal.SIGKILL):
            # Its partitions stayed here, so the rebuild is whole; but say why it did not help.
            log.warning(
                "rebuild.worker_failed_to_start",
                code=worker.proc.returncode,
                error=worker.stderr.decode(errors="replace").strip()[-500:],
            )
        error = worker.failure(stopped=self._stop.is_set())
        if error is not None:
            raise error

    async def _hand_over(self) -> dict[int, int]:
        """Take a ready worker's share away from this process' projector: partition -> until."""
        share = _share_for(_left(self._until, self._projector.positions), self._unserved, self._batch_size)
        self._unserved -= 1
        await self._source.release(share)
        for p in share:
            self._until.pop(p, None)
        if share:
            say(
                f"a worker process joined after {time.monotonic() - self._started:.1f} s: "
                f"partitions {', '.join(map(str, share))} handed over to it"
            )
        return {p: self._todo[p] for p in share}


def _left(until: Mapping[int, int], positions: Mapping[int, int]) -> dict[int, int]:
    """Records left per partition of this process'."""
    left = {p: o - positions.get(p, 0) for p, o in until.items()}
    return {p: n for p, n in left.items() if n > 0}


def _share_for(remaining: Mapping[int, int], among: int, batch_size: int) -> list[int]:
    """The partitions to hand a worker that is ready: the smallest of ``among`` balanced shares
    of what is left (this process keeps the others, for itself and the workers still starting;
    the worker has its first fetch still to make), or none when that is less than a batch."""
    groups = [g for g in shares(remaining, among + 1) if g] if among > 0 else []
    if len(groups) < 2:
        return []
    smallest = min(groups, key=lambda g: sum(g.values()))
    return sorted(smallest) if sum(smallest.values()) >= batch_size else []


def shares(todo: Mapping[int, int], workers: int) -> list[dict[int, int]]:
    """Split the partitions to build over ``workers``, the largest first to the least loaded."""
    loads: list[tuple[int, dict[int, int]]] = [(0, {}) for _ in range(min(workers, len(todo)))]
    for p, n in sorted(todo.items(), key=lambda item: -item[1]):
        i = min(range(len(loads)), key=lambda j: loads[j][0])
        loads[i] = (loads[i][0] + n, {**loads[i][1], p: n})
    return [share for _, share in loads]


async def start_worker(schema: str, flags: list[str], env: dict[str, str]) -> WorkerProcess:
    """A worker that starts, says it is ready, and reads its share on stdin. In a session of its
    own: a terminal's Ctrl-C reaches it once, through this process. Forked where it can be (it
    then has nothing to load: :mod:`convlog.ops.forked`), else started afresh."""
    if CAN_FORK:
        try:
            return await fork_worker([schema, "-", *flags], env)
        except OSError as e:
            log.warning("rebuild.worker_not_forked", error=str(e), hint="starting it afresh")
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "convlog.ops.rebuild_worker",
        schema,
        "-",
        *flags,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
