"""The wheel works outside the repo.

Built from this checkout, installed into a fresh venv in a temporary directory (dependencies
from the package index, as a user gets them), it runs ``convlog demo`` and ``convlog stop``
there, with that directory as the working directory and no ``PYTHONPATH``; the packages import
from the venv with their public API, carry ``py.typed`` (mypy reads their types) and find their
data files (schemas, migrations, SQL, prompts) inside the venv, and the dev services are not in it. An audit
hook in the venv's interpreter records every file, directory or program of the checkout that
any of those processes opens, lists or runs: there must be none.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.wheel, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("events", "projectors", "query_api", "summarizer", "pgstore", "convlog")

# Installed into the venv's site-packages and loaded by a .pth line at every interpreter start:
# with WHEEL_TEST_REPO set, every audited access to a path under it is appended to
# WHEEL_TEST_AUDIT_LOG (one JSON line each). Written with os.write to an fd opened before the
# hook is installed, so recording an event raises none.
_AUDIT_HOOK = """
import json, os, sys

_REPO = os.environ.get("WHEEL_TEST_REPO")
_EVENTS = {"open", "os.listdir", "os.scandir", "os.chdir", "os.exec", "os.posix_spawn", "os.spawn",
           "subprocess.Popen", "shutil.copyfile", "shutil.copytree", "os.walk", "glob.glob"}


def _paths(value):
    if isinstance(value, (str, bytes, os.PathLike)):
        yield os.fsdecode(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _paths(item)


def _install(repo, log):
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    prefix = os.path.realpath(repo) + os.sep

    def hook(event, args):
        if event not in _EVENTS:
            return
        for path in _paths(args[:3]):
            if path and (os.path.realpath(path) + os.sep).startswith(prefix):
                os.write(fd, (json.dumps({"event": event, "path": path, "pid": os.getpid()}) + "\\n").encode())

    sys.addaudithook(hook)


if _REPO:
    _install(_REPO, os.environ["WHEEL_TEST_AUDIT_LOG"])
"""

_CHECK_INSTALL = """
import importlib, importlib.util, json, sys
import events, projectors, query_api, summarizer, pgstore, convlog
from events.codec import _bundled_schema_dir
from pgstore.migrate import MIGRATIONS_DIR
from summarizer.prompt import PROMPTS_DIR

packages = [events, projectors, query_api, summarizer, pgstore, convlog]
print(json.dumps({
    "files": {p.__name__: p.__file__ for p in packages},
    "unresolved": [f"{p.__name__}.{n}" for p in packages for n in p.__all__ if getattr(p, n, None) is None],
    "data": [str(_bundled_schema_dir()), str(MIGRATIONS_DIR), str(PROMPTS_DIR)],
    "dev_only": [name for name in ("devservices", "convlog.local") if importlib.util.find_spec(name) is not None],
    "path": sys.path,
}))
"""


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    root: Path  # the temporary directory outside the repo holding the venv
    audit_log: Path

    @property
    def site_packages(self) -> Path:
        return next((self.venv / "lib").glob("python3*/site-packages"))

    def env(self) -> dict[str, str]:
        """A user's environment: no PYTHONPATH, no CONVLOG_* (so the embedded defaults), the
        venv first on PATH, and the audit hook armed."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CONVLOG_", "PYTHON", "VIRTUAL_ENV"))}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
        env["WHEEL_TEST_REPO"] = str(REPO)
        env["WHEEL_TEST_AUDIT_LOG"] = str(self.audit_log)
        return env

    def run(self, *argv: str | Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in argv],
            cwd=cwd,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def repo_accesses(self) -> list[dict[str, object]]:
        lines = self.audit_log.read_text().splitlines() if self.audit_log.exists() else []
        return [json.loads(line) for line in lines]


def _checked(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"{result.args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("wheel")
    assert not root.resolve().is_relative_to(REPO)
    started = time.monotonic()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    _checked(
        subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--outdir", str(root / "dist"), str(REPO)],
            cwd=root,
            env=clean,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    )
    (wheel,) = (root / "dist").glob("convlog-*.whl")
    built = time.monotonic()
    venv = root / "venv"
    _checked(
        subprocess.run(
            [sys.executable, "-m", "venv", str(venv)],
            cwd=root,
            env=clean,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    )
    _checked(
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)],
            cwd=root,
            env=clean,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    )
    result = Installed(wheel, venv, root, root / "repo-accesses.jsonl")
    (result.site_packages / "_wheel_test_audit.py").write_text(_AUDIT_HOOK)
    (result.site_packages / "_wheel_test_audit.pth").write_text("import _wheel_test_audit\n")
    print(f"wheel built in {built - started:.1f}s, installed with its dependencies in {time.monotonic() - built:.1f}s")
    yield result
    shutil.rmtree(venv, ignore_errors=True)  # ~170 MB; pytest keeps the last three runs' temporary directories


@pytest.fixture
def outside(installed: Installed, tmp_path: Path) -> Path:
    """A fresh working directory outside the repo; the audit log starts empty for each test."""
    installed.audit_log.unlink(missing_ok=True)
    assert not tmp_path.resolve().is_relative_to(REPO)
    return tmp_path


def test_the_wheel_carries_py_typed_and_every_data_file(installed: Installed) -> None:
    """What the installed packages read at run time is in the wheel, under the package that reads it."""
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    expected = {f"{p}/py.typed" for p in PACKAGES}
    expected |= {f"events/_schemas/{p.name}" for p in (REPO / "schemas").iterdir() if p.is_file()}
    for directory in ("pgstore/migrations", "pgstore/sql", "summarizer/prompts"):
        found = {p.relative_to(REPO).as_posix() for p in (REPO / directory).iterdir() if p.is_file()}
        assert found, directory
        expected |= found
    assert sorted(expected - names) == []
    assert [n for n in names if "__pycache__" in n or n.startswith(("tests/", "services/", "bench/"))] == []
    # The dev services (make services-up, the tests' Kafka and Postgres) are not the product's.
    assert [n for n in names if n.startswith(("devservices/", "convlog/local/"))] == []


def test_the_audit_hook_sees_a_file_of_the_repo_being_opened(installed: Installed, outside: Path) -> None:
    """The control for the tests below: an open() of a repo file is recorded."""
    python = installed.venv / "bin" / "python"
    _checked(installed.run(python, "-c", f"open({str(REPO / 'pyproject.toml')!r}).close()", cwd=outside))
    assert [a["path"] for a in installed.repo_accesses()] == [str(REPO / "pyproject.toml")]


def test_the_installed_packages_import_from_the_venv_with_their_public_api(installed: Installed, outside: Path) -> None:
    python = installed.venv / "bin" / "python"
    report = json.loads(_checked(installed.run(python, "-c", _CHECK_INSTALL, cwd=outside)).stdout)
    site = installed.site_packages.resolve()
    for package, file in report["files"].items():
        assert Path(file).resolve().is_relative_to(site), (package, file)
    assert report["unresolved"] == []
    assert report["dev_only"] == []  # no dev services installed: the embedded defaults need none
    for data in report["data"]:  # the Avro schemas, the migrations, the prompts
        assert Path(data).resolve().is_relative_to(site), data
        assert Path(data).exists(), data
    assert not [p for p in report["path"] if p and Path(p).resolve().is_relative_to(REPO)]
    assert installed.repo_accesses() == []


def test_convlog_demo_runs_from_the_installed_wheel_outside_the_repo(installed: Installed, outside: Path) -> None:
    convlog = installed.venv / "bin" / "convlog"
    try:
        demo = _checked(installed.run(convlog, "demo", cwd=outside, timeout=300))
    finally:
        stop = installed.run(convlog, "stop", cwd=outside)
    assert "context for the next turn of acme:employee-42:oa-overtime-" in demo.stdout
    assert "running summary of acme:employee-42:oa-overtime-" in demo.stdout
    _checked(stop)
    assert "stopped the embedded Postgres" in stop.stdout
    assert (outside / ".convlog" / "log" / "convlog.events.log").is_file()  # the embedded defaults, in the cwd
    assert installed.repo_accesses() == []


def test_mypy_reads_the_installed_packages_types(installed: Installed, outside: Path) -> None:
    """With py.typed, mypy analyses the installed packages (without it: "module is installed,
    but missing library stubs or py.typed marker"), so a wrong use of their types is an error."""
    program = outside / "app.py"
    program.write_text(
        textwrap.dedent("""
            from events import ConversationKey
            from query_api import ContextRequest

            key: int = ConversationKey("acme", "u1", "c1")
            request = ContextRequest("gpt-4o", 1000)
        """)
    )
    python = installed.venv / "bin" / "python"
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--python-executable", str(python), str(program)],
        cwd=outside,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "missing library stubs or py.typed marker" not in result.stdout, result.stdout
    assert 'has type "ConversationKey", variable has type "int"' in result.stdout, result.stdout
    assert result.stdout.count("error:") == 1, result.stdout
