"""Building and running the foreign producer examples (``examples/go-producer``,
``examples/ts-producer``) from tests, and the end-to-end check they share: run against the
test broker with the golden vectors' fixed ids (``schemas/vectors/events.json``), every record
is the vectors' bytes on the vectors' partition, decodes to the Python producer's event,
projects and is served in a context.

Builds are cached in each example's own ignored output directory and redone only when an
input changed (a hash of them sits beside the output), as ``tests/java_example.py`` does. Go
fetches modules from the Go proxy once, checked against ``go.sum``; its module cache makes
later builds offline.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GO_EXAMPLE = REPO / "examples" / "go-producer"
GO_BINARY = GO_EXAMPLE / "bin" / "go-producer"
TS_EXAMPLE = REPO / "examples" / "ts-producer"
TS_MAIN = TS_EXAMPLE / "dist" / "src" / "main.js"
VECTORS = REPO / "schemas" / "vectors"


class ExampleError(RuntimeError):
    pass


def events_vectors() -> dict[str, Any]:
    return json.loads((VECTORS / "events.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def keys_vectors() -> dict[str, Any]:
    return json.loads((VECTORS / "keys.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def vector_turn_args() -> list[str]:
    """The options that make an example write the vectors' turn (its ids, times, producer)."""
    turn = events_vectors()["turn"]
    return [
        "--tenant",
        turn["tenant_id"],
        "--user",
        turn["user_id"],
        "--conversation",
        turn["conversation_id"],
        "--event-id-prefix",
        turn["event_id_prefix"],
        "--occurred-at",
        str(turn["first_occurred_at_micros"]),
        "--producer",
        turn["producer"],
    ]


def _inputs_hash(root: Path, paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        if path.is_file():
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def go_env() -> dict[str, str]:
    # The toolchain on PATH, never one downloaded for the go line; modules only as go.sum pins them.
    return {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}


def go_or_skip() -> str:
    """The ``go`` executable; without one the test is skipped (failed where the services are
    required: CI has Go)."""
    import pytest  # noqa: PLC0415 - only tests call this

    from tests.support import services_required  # noqa: PLC0415

    go = shutil.which("go")
    if go is None:
        if services_required():
            pytest.fail("CONVLOG_REQUIRE_SERVICES=1 but Go (go) is not on PATH: it builds examples/go-producer")
        pytest.skip("no Go toolchain (go): it builds examples/go-producer")
    return go


def build_go(go: str) -> Path:
    """``examples/go-producer/bin/go-producer``, built if an input changed since the last build."""
    GO_BINARY.parent.mkdir(exist_ok=True)
    with (GO_BINARY.parent / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # test runs side by side share one bin/
        stamp = GO_BINARY.parent / "convlog-build.sha256"
        wanted = _inputs_hash(
            GO_EXAMPLE, [*GO_EXAMPLE.glob("*.go"), *GO_EXAMPLE.glob("go.*"), *GO_EXAMPLE.glob("*.avsc")]
        )
        if not (GO_BINARY.is_file() and stamp.is_file() and stamp.read_text() == wanted):
            # No -trimpath: the build then reuses the packages `go test` compiled (one compile, not two).
            run_checked(
                [go, "build", "-o", str(GO_BINARY), "."],
                cwd=GO_EXAMPLE,
                env=go_env(),
                timeout_s=600,
                what="building examples/go-producer",
            )
            stamp.write_text(wanted)
    return GO_BINARY


def node_or_skip() -> tuple[str, str]:
    """``node`` and ``npm``; without them the test is skipped (failed where the services are
    required: CI has Node)."""
    import pytest  # noqa: PLC0415 - only tests call this

    from tests.support import services_required  # noqa: PLC0415

    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        if services_required():
            pytest.fail("CONVLOG_REQUIRE_SERVICES=1 but no Node.js (node, npm) on PATH: examples/ts-producer needs it")
        pytest.skip("no Node.js (node, npm): it builds examples/ts-producer")
    return node, npm


def build_ts(node: str, npm: str) -> Path:
    """``examples/ts-producer/dist/src/main.js``: ``npm ci`` from the lock file when it changed
    (``--ignore-scripts``: nothing downloads a binary; ``--prefer-offline``: npm's cache first),
    then ``tsc`` when a source changed."""
    TS_EXAMPLE.joinpath("dist").mkdir(exist_ok=True)
    with (TS_EXAMPLE / "dist" / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # test runs side by side share one dist/
        modules = TS_EXAMPLE / "node_modules"
        installed = modules / ".convlog-install.sha256"
        wanted = _inputs_hash(TS_EXAMPLE, [TS_EXAMPLE / "package-lock.json"])
        if not (installed.is_file() and installed.read_text() == wanted):
            run_checked(
                [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline"],
                cwd=TS_EXAMPLE,
                timeout_s=600,
                what="npm ci in examples/ts-producer",
            )
            installed.write_text(wanted)
        stamp = TS_EXAMPLE / "dist" / "convlog-build.sha256"
        sources = [
            *TS_EXAMPLE.glob("src/*.ts"),
            *TS_EXAMPLE.glob("test/*.ts"),
            *TS_EXAMPLE.glob("*.json"),
            *TS_EXAMPLE.glob("*.avsc"),
        ]
        built = _inputs_hash(TS_EXAMPLE, sources)
        if not (TS_MAIN.is_file() and stamp.is_file() and stamp.read_text() == built):
            run_checked(
                [node, str(modules / "typescript" / "bin" / "tsc"), "-p", "."],
                cwd=TS_EXAMPLE,
                timeout_s=300,
                what="tsc in examples/ts-producer",
            )
            stamp.write_text(built)
    return TS_MAIN


def run_checked(
    command: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout_s: float, what: str
) -> str:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=timeout_s)
    if result.returncode != 0:
        raise ExampleError(f"{what} failed ({result.returncode}):\n{(result.stdout + result.stderr)[-4000:]}")
    return result.stdout


def run_producer(command: list[str], *, cwd: Path, timeout_s: float = 120) -> list[dict[str, Any]]:
    """Runs an example producer; returns the JSON lines it printed (one per acknowledged event)."""
    out = run_checked(command, cwd=cwd, timeout_s=timeout_s, what=" ".join(command[:2]))
    return [json.loads(line) for line in out.splitlines() if line.strip()]
