"""Process and port helpers of the servers convlog runs on this machine: the embedded Postgres, and
the dev services (``devservices``: the local Kafka and Postgres) built on it (stdlib, settings, error tree)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from convlog.settings import Settings
from events.errors import ConvlogError

HOST = "127.0.0.1"


class ServiceError(ConvlogError, RuntimeError):
    """A local service could not be prepared, started or reached."""

    code = "service_error"


class PortTakenError(ServiceError):
    """The service's port is held by another process: a foreign server answered there, or our
    server could not bind it. Nothing of ours runs afterwards; a caller free to choose the port
    (the embedded Postgres) tries another, one with a configured port reports it."""

    code = "port_taken"


class StoppedOnExit:
    """``with handle:`` stops the service (its ``stop()``) when the block ends, however it ends."""

    def stop(self, timeout: float = 30.0) -> bool:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def services_root(settings: Settings | None = None) -> Path:
    """``$CONVLOG_DATA_DIR/services``, by default ``.convlog/services`` in the current directory
    (beside the embedded defaults' ``.convlog``; ``make`` runs in the repo). Never found from the
    package's own location: an installed package does not live in a checkout. Without
    ``settings``, those of the environment."""
    return (settings or Settings.from_env()).data_dir.resolve() / "services"


# ---------------------------------------------------------------- process helpers (shared)


def progress(message: str) -> None:
    sys.stderr.write(f"devservices: {message}\n")
    sys.stderr.flush()


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of ``pid`` from /proc, None if there is no such process."""
    return _proc_stat_path(Path(f"/proc/{pid}/stat"))


def _proc_stat_path(path: Path) -> tuple[str, int] | None:
    try:
        fields = path.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def pid_alive(pid: int) -> bool:
    """True if ``pid`` runs. Reaps it if it is an exited child of ours; zombies count as dead
    (an orphan's zombie may never be reaped when PID 1 is not a real init, as in some sandboxes).
    """
    with contextlib.suppress(OSError):
        os.waitpid(pid, os.WNOHANG)
    stat = _proc_stat(pid)
    if stat is not None:
        if stat[0] not in ("Z", "X"):
            return True
        # A multi-threaded process (a JVM) shows its leader as a zombie while its other threads,
        # which still hold its sockets and files, are exiting: alive until they are all gone.
        return any(
            (_proc_stat_path(task / "stat") or ("Z", 0))[0] not in ("Z", "X")
            for task in Path(f"/proc/{pid}/task").glob("[0-9]*")
        )
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return [""]


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live descendants (PostgreSQL's children run in sessions of their own)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        stat = _proc_stat(int(entry.name))
        if stat is not None and stat[0] not in ("Z", "X"):
            parents.setdefault(stat[1], []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(parents.get(current, []))
    return tree


def kill_tree(pids: list[int], timeout: float = 10.0) -> None:
    """SIGKILL ``pids`` (and the process groups they lead) and wait until they are gone."""
    for pid in pids:
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(OSError):
                kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def stop_process(pid: int, sig: int, timeout: float) -> bool:
    """Send ``sig`` to ``pid``, wait up to ``timeout`` s for it and its descendants to exit, then
    SIGKILL them. Returns True if they exited by themselves.
    """
    tree = process_tree(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(pid_alive(p) for p in tree):
            return True
        time.sleep(0.1)
    kill_tree(process_tree(pid) + tree)
    return False


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no {path})"
    return "\n".join(text.splitlines()[-lines:])


def port_in_use(port: int) -> bool:
    """Whether something holds 127.0.0.1:``port`` (binding it as servers do fails)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is fine
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


def ensure_port_free(port: int, what: str) -> None:
    """Fail early, with a clear message, if something already listens on 127.0.0.1:``port``."""
    if port_in_use(port):
        raise PortTakenError(
            f"{what}: {HOST}:{port} is already in use; stop whatever listens there or pick other ports"
        )


def spawn_detached(
    argv: Sequence[str],
    log: Path,
    *,
    cwd: Path,
    user: int | None = None,
    group: int | None = None,
    env: dict[str, str] | None = None,
) -> int:
    """Start ``argv`` in its own session with stdout/stderr appended to ``log``; return its pid.

    With ``user``/``group`` (we are root) the process runs as that uid/gid without extra groups.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        shown = " ".join(arg if len(arg) < 200 else f"{arg[:80]}...({len(arg)} chars)" for arg in argv)
        out.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} {shown}\n".encode())
        out.flush()
        proc = subprocess.Popen(  # noqa: S603 - fixed argv built by us
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            cwd=cwd,
            env=env,
            user=user,
            group=group,
            extra_groups=[] if user is not None else None,
        )
    proc.returncode = 0  # we track the pid ourselves; keep Popen.__del__ from warning
    return int(proc.pid)


# ---------------------------------------------------------------- classpath
