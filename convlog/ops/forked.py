"""A rebuild worker forked from this process instead of started afresh: it has paid nothing yet.

A worker started as ``python -m convlog.ops.rebuild_worker`` pays its imports and the tiktoken
tables again (~0.8 s of CPU: on two cores, the CPU of ~15,000 events) before it can take any
partition. A fork shares this process's memory, all of that already loaded, and only opens its
own connections. What it must not do is touch anything of this process's: its sockets (Kafka,
Postgres, the event loop's), its loop, its garbage. So the child, at once:

- freezes the collector (the parent's objects are never collected there, so no finalizer of a
  parent's socket or connection ever runs in the child);
- points every inherited descriptor above 2 at ``/dev/null`` (not closed: a number left free
  would be reused by the child's own connections, and a stray close of the old one would then
  close a new one), after putting its pipes on 0, 1 and 2;
- drops the parent's signal wake-up descriptor, starts a session of its own, and runs
  :func:`convlog.ops.rebuild_worker.main` on a new event loop, with the worker's settings;
- leaves with ``os._exit``: no parent's ``atexit`` or buffered output runs twice.

The parent sees the surface of :class:`asyncio.subprocess.Process` that
:mod:`convlog.ops.rebuild_sharing` uses. Where ``os.fork`` is missing, workers are started afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
import traceback
from collections.abc import Sequence

from convlog.ops import rebuild_worker

CAN_FORK = hasattr(os, "fork") and sys.platform == "linux"  # /proc/self/fd lists what to neutralise
_CRASHED = 70  # EX_SOFTWARE: the child failed before the worker's own exit codes applied


class ForkedWorker:
    """A forked rebuild worker: its pipes as asyncio streams, its exit code once it has exited."""

    def __init__(
        self, pid: int, stdin: asyncio.StreamWriter, stdout: asyncio.StreamReader, stderr: asyncio.StreamReader
    ) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._exited: asyncio.Task[int] = asyncio.create_task(asyncio.to_thread(_reap, pid))
        self._exited.add_done_callback(self._note)

    def _note(self, task: asyncio.Task[int]) -> None:
        if not task.cancelled() and task.exception() is None:
            self.returncode = task.result()

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _reap(pid: int) -> int:
    """The child's exit code as asyncio reports one: negative for the signal that ended it."""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


async def fork_worker(argv: Sequence[str], env: dict[str, str]) -> ForkedWorker:
    """A child running ``rebuild_worker.main(argv)`` with the settings of ``env`` (what a worker
    started afresh would find in its environment)."""
    loop = asyncio.get_running_loop()
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # or the child would write this process's buffered output again
    try:
        pid = os.fork()
    except OSError:  # no memory or process slot for a copy: the caller starts a worker afresh
        for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
            os.close(fd)
        raise
    if pid == 0:  # pragma: no cover - the child; its behaviour is the rebuild tests' (it exits, never returns)
        code = _CRASHED
        try:
            _become_worker(in_r, out_w, err_w)
            code = rebuild_worker.main(list(argv), env=env)
        except BaseException:  # noqa: BLE001 - whatever it was, the parent reads it on stderr
            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    stdout, stderr = asyncio.StreamReader(), asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdout), os.fdopen(out_r, "rb", 0))
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stderr), os.fdopen(err_r, "rb", 0))
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(in_w, "wb", 0))
    stdin = asyncio.StreamWriter(transport, protocol, None, loop)
    return ForkedWorker(pid, stdin, stdout, stderr)


def _become_worker(stdin: int, stdout: int, stderr: int) -> None:  # pragma: no cover - child
    gc.freeze()
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDWR)
    for name in os.listdir("/proc/self/fd"):  # noqa: PTH208 - descriptor numbers, not paths
        fd = int(name)
        if fd > 2 and fd != devnull:
            with contextlib.suppress(OSError):  # the listing's own descriptor, gone by now
                os.dup2(devnull, fd)
    os.setsid()
    # Fresh streams on 0, 1 and 2: the parent's may be wrappers of something else (a test's capture).
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own streams, kept open
    sys.stdout = open(1, "w", encoding="utf-8", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", buffering=1, closefd=False)  # noqa: SIM115
