"""Building and running ``examples/java-producer`` (Maven, kafka-clients + Avro) from tests.

The build is cached in the example's own ``target/``: it is redone only when the pom, a source
file or the schema it bundles changed (a hash of them sits beside the classes). Maven runs
offline first, so a machine that has the artifacts in ``~/.m2`` needs no network, and online
when that fails (a fresh machine fetches them from Maven Central once).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from devservices.kafka_service import java_executable

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "java-producer"
MAIN_CLASS = "example.convlog.ChatEventProducer"
BUNDLED_SCHEMAS = (REPO / "schemas" / "event.v3.avsc", REPO / "schemas" / "event.v5.avsc")  # plain, sealed
# The codecs the example is run with against convlog (tests/kafka/test_java_producer_settings.py):
# docs/producers.md calls exactly these safe (tests/test_producer_contract.py).
VERIFIED_CODECS = ("gzip", "snappy", "lz4", "zstd")


class JavaExampleError(RuntimeError):
    pass


def _inputs_hash() -> str:
    digest = hashlib.sha256()
    for path in [EXAMPLE / "pom.xml", *BUNDLED_SCHEMAS, *sorted((EXAMPLE / "src").rglob("*"))]:
        if path.is_file():
            digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def build_classpath() -> str:
    """The example's run classpath (its classes, then its dependencies), building it if needed."""
    target = EXAMPLE / "target"
    target.mkdir(exist_ok=True)
    with (target / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # test runs side by side share one target/
        return _build(target)


def _build(target: Path) -> str:
    stamp, deps = target / "convlog-build.sha256", target / "classpath.txt"
    wanted = _inputs_hash()
    if not (stamp.is_file() and stamp.read_text() == wanted and deps.is_file() and _jars_present(deps)):
        mvn = shutil.which("mvn")
        if mvn is None:
            raise JavaExampleError("Maven (mvn) is not on PATH: it builds examples/java-producer")
        goals = [
            "-q",
            "-B",
            "-f",
            str(EXAMPLE / "pom.xml"),
            "compile",
            "dependency:build-classpath",
            f"-Dmdep.outputFile={deps}",
        ]
        result = subprocess.run([mvn, "-o", *goals], capture_output=True, text=True, check=False, timeout=300)
        if result.returncode != 0:  # some artifact is not in ~/.m2 yet: fetch it
            result = subprocess.run([mvn, *goals], capture_output=True, text=True, check=False, timeout=600)
        if result.returncode != 0:
            raise JavaExampleError(f"building the Java example failed:\n{(result.stdout + result.stderr)[-4000:]}")
        stamp.write_text(wanted)
    return os.pathsep.join([str(target / "classes"), deps.read_text().strip()])


def _jars_present(classpath_file: Path) -> bool:
    return all(Path(jar).is_file() for jar in classpath_file.read_text().strip().split(os.pathsep) if jar)


def run_example(classpath: str, *args: str, timeout_s: float = 120) -> list[dict[str, Any]]:
    """Runs the example's main class; returns the JSON lines it printed."""
    return [json.loads(line) for line in run_lines(classpath, *args, timeout_s=timeout_s)]


def run_lines(classpath: str, *args: str, timeout_s: float = 120) -> list[str]:
    """Runs the example's main class; returns the lines it printed."""
    result = subprocess.run(
        [java_executable(), "-cp", classpath, MAIN_CLASS, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout_s,
    )
    if result.returncode != 0:
        raise JavaExampleError(f"the Java example failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return [line for line in result.stdout.splitlines() if line.strip()]


def classpath_or_skip() -> str:
    """The example's classpath for a test; without Maven the test is skipped (failed where the
    services are required)."""
    import pytest  # noqa: PLC0415 - only tests call this

    from tests.support import services_required  # noqa: PLC0415

    if shutil.which("mvn") is None:
        if services_required():
            pytest.fail("CONVLOG_REQUIRE_SERVICES=1 but Maven (mvn) is not on PATH: it builds examples/java-producer")
        pytest.skip("no Maven: it builds examples/java-producer")
    return build_classpath()


# The turn the example writes, as a context serves it (ChatEventProducer.turn()).
TURN_TITLE = "Overtime request"
TURN_CONTEXT: list[dict[str, Any]] = [
    {"role": "user", "content": "How do I file an overtime request in the OA system?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "search_kb", "arguments": '{"q": "overtime request"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"hits": 3, "top": "OA > Attendance > Overtime"}'},
    {"role": "assistant", "content": "Open OA, then Attendance > Overtime, and submit the form."},
]
