"""Several API instances behind a load balancer: two ``convlog serve --no-projector
--no-summarizer`` processes and one ``convlog project`` on one topic and one database.

What a deployment relies on: a write through A is read through B with ``min_offset``; an
``Idempotency-Key`` repeated on another instance appends nothing; each instance's ``/readyz``
is about its own dependencies — and when the projector dies the API instances stay ready (they
still take appends), their reports show the lag growing, and a read-your-writes wait answers
503 ``not_caught_up`` saying the projectors are behind, until a projector is back.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from convlog.runtime.projecting import run_projector
from convlog.settings import Settings
from events.kafka_log import KafkaEventLog
from events.keys import ConversationKey
from events.producer import ConversationProducer
from pgstore.migrate import migrate
from tests.projection_support import temporary_database
from tests.support import free_port, unique_topic

pytestmark = [pytest.mark.kafka, pytest.mark.postgres]

TOKEN = "instances-token"  # noqa: S105 -- the test deployment's token
AUTH = {"Authorization": f"Bearer {TOKEN}"}
API_ONLY = ["serve", "--no-projector", "--no-summarizer"]
RYW_WAIT_S = 5.0  # how long a min_offset read waits for the projection (the API's bound)


@dataclass
class Deployment:
    env: dict[str, str]
    logs: Path
    a: httpx.Client
    b: httpx.Client
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, *args: str, port: int | None = None) -> None:
        env = {**self.env, **({"CONVLOG_HTTP_PORT": str(port)} if port else {})}
        with (self.logs / f"{name}.log").open("ab") as out:
            self.processes[name] = subprocess.Popen(
                [sys.executable, "-m", "convlog.cli.main", *args], env=env, stdout=out, stderr=out
            )

    def log_lines(self, name: str) -> list[dict[str, Any]]:
        lines = (self.logs / f"{name}.log").read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def assigned(self, name: str) -> bool:
        """Whether projector ``name`` was given partitions (a group's first join takes seconds)."""
        return any(line["event"] == "projector.assigned" for line in self.log_lines(name))

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        process = self.processes.pop(name)
        process.send_signal(sig)
        process.wait(30)


def _wait(what: str, done: Callable[[], bool], deployment: Deployment, timeout_s: float = 40) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        for name, process in deployment.processes.items():
            assert process.poll() is None, f"{name} exited: {(deployment.logs / f'{name}.log').read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _ready(client: httpx.Client) -> bool:
    try:
        return client.get("/readyz").status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture(scope="module")
def three_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The three processes, started together on a fresh database and topic (as a deployment's
    services are): the API instances must not wait for the projector to be up."""
    admin_url, bootstrap = os.environ.get("CONVLOG_DATABASE_URL"), os.environ.get("CONVLOG_KAFKA_BOOTSTRAP")
    if not admin_url or not bootstrap:
        pytest.skip("needs CONVLOG_DATABASE_URL and CONVLOG_KAFKA_BOOTSTRAP (make services-up)")
    name = f"convlog_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    logs = tmp_path_factory.mktemp("instances")
    env = {
        **os.environ,
        "CONVLOG_DATABASE_URL": make_conninfo(admin_url, dbname=name),
        "CONVLOG_KAFKA_BOOTSTRAP": bootstrap,
        "CONVLOG_TOPIC": unique_topic("instances"),
        "CONVLOG_PARTITIONS": "3",
        "CONVLOG_API_TOKENS": f"acme:{TOKEN}",
        "CONVLOG_DATA_DIR": str(logs),
        # a killed projector's partitions move to its replacement after this long
        "CONVLOG_KAFKA_SESSION_TIMEOUT_MS": "6000",
        "CONVLOG_LOG_LEVEL": "info",
    }
    for variable in ("CONVLOG_LLM_BASE_URL", "OPENAI_BASE_URL", "CONVLOG_PROJECTOR", "CONVLOG_SUMMARIZER"):
        env.pop(variable, None)
    port_a, port_b = free_port(), free_port()
    with (
        httpx.Client(base_url=f"http://127.0.0.1:{port_a}", timeout=30) as a,
        httpx.Client(base_url=f"http://127.0.0.1:{port_b}", timeout=30) as b,
    ):
        d = Deployment(env, logs, a, b)
        try:
            d.start("projector", "project")
            d.start("a", *API_ONLY, port=port_a)
            d.start("b", *API_ONLY, port=port_b)
            _wait("both API instances ready", lambda: _ready(a) and _ready(b), d, timeout_s=60)
            _wait("the projector owns the partitions", lambda: d.assigned("projector"), d, timeout_s=60)
            yield d
        finally:
            for process in list(d.processes):
                d.stop(process)
            with psycopg.connect(admin_url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _append(client: httpx.Client, conversation: str, text: str, **headers: str) -> httpx.Response:
    return client.post(
        f"/v1/users/u1/conversations/{conversation}/messages",
        json={"role": "user", "content": text},
        headers={**AUTH, **headers},
    )


def _context(client: httpx.Client, conversation: str, min_offset: int) -> httpx.Response:
    return client.get(
        f"/v1/users/u1/conversations/{conversation}/context",
        headers=AUTH,
        params={"model": "gpt-4o-mini", "budget_tokens": 4000, "min_offset": min_offset},
    )


def test_api_only_instances_say_their_roles_and_are_ready_without_a_projector_of_their_own(
    three_processes: Deployment,
) -> None:
    for name, client in (("a", three_processes.a), ("b", three_processes.b)):
        report = client.get("/readyz")
        assert report.status_code == 200, report.text
        body = report.json()
        assert body["roles"] == ["api"]
        assert (body["log"], body["postgres"], body["ready"]) == (True, True, True)
        assert {"projector", "summarizer"} - body.keys() == {"projector", "summarizer"}  # nothing it does not run
        assert body["lag"] == 0  # the projector elsewhere, as the read models say
        [started] = [line for line in three_processes.log_lines(name) if line["event"] == "serve.roles"]
        assert started["roles"] == ["api"]
        assert started["run_elsewhere"] == ["convlog project", "convlog summarize"]


def test_a_write_through_a_is_read_through_b_with_min_offset(three_processes: Deployment) -> None:
    for turn in range(3):
        appended = _append(three_processes.a, "ryw", f"question {turn}")
        assert appended.status_code == 202, appended.text
        context = _context(three_processes.b, "ryw", appended.json()["offset"])
        assert context.status_code == 200, context.text
        assert [m["content"] for m in context.json()["messages"]] == [f"question {t}" for t in range(turn + 1)]


def test_an_idempotency_key_repeated_on_another_instance_appends_nothing(three_processes: Deployment) -> None:
    first = _append(three_processes.a, "idem", "once", **{"Idempotency-Key": "key-1"})
    assert first.status_code == 202, first.text
    again = _append(three_processes.b, "idem", "once", **{"Idempotency-Key": "key-1"})
    assert again.status_code == 202, again.text
    assert again.json() == first.json()  # the first append's coordinates
    other = _append(three_processes.b, "idem", "another body", **{"Idempotency-Key": "key-1"})
    assert other.status_code == 409, other.text
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    # Once more on A, after B's answers: still the one record.
    assert _append(three_processes.a, "idem", "once", **{"Idempotency-Key": "key-1"}).json() == first.json()
    events = three_processes.b.get("/v1/users/u1/conversations/idem/events", headers=AUTH).json()["events"]
    assert [(e["event_id"], e["offset"]) for e in events] == [("key-1", first.json()["offset"])]


def test_one_key_sent_to_both_instances_at_once_is_one_message(three_processes: Deployment) -> None:
    """A client's retry racing its first try on another instance: both may append (the log
    orders them), and both answer the first record; the read models hold one message."""
    for n in range(5):
        key = {"Idempotency-Key": f"race-{n}"}
        with ThreadPoolExecutor(2) as pool:
            sent = [
                pool.submit(_append, client, "race", f"message {n}", **key)
                for client in (three_processes.a, three_processes.b)
            ]
            answers = [s.result() for s in sent]
        assert [a.status_code for a in answers] == [202, 202], [a.text for a in answers]
        assert answers[0].json() == answers[1].json()
        context = _context(three_processes.b, "race", answers[0].json()["offset"])
        assert [m["content"] for m in context.json()["messages"]] == [f"message {i}" for i in range(n + 1)]


def test_without_a_projector_the_api_stays_ready_and_read_your_writes_says_why_it_waits(
    three_processes: Deployment,
) -> None:
    _wait("the projector caught up", lambda: three_processes.a.get("/readyz").json()["lag"] == 0, three_processes)
    three_processes.stop("projector", signal.SIGKILL)
    appended = _append(three_processes.a, "outage", "written while no projector runs")
    assert appended.status_code == 202, appended.text  # the API still takes appends
    started = time.monotonic()
    waited = _context(three_processes.b, "outage", appended.json()["offset"])
    assert waited.status_code == 503, waited.text
    assert time.monotonic() - started >= RYW_WAIT_S - 0.5  # it waited its bound, then said so
    error = waited.json()["error"]
    assert error["code"] == "not_caught_up"
    assert error["partition"] == appended.json()["partition"]
    assert error["projected"] == appended.json()["offset"]  # nothing of it projected
    assert "projectors are behind or not running" in error["message"]
    for client in (three_processes.a, three_processes.b):
        report = client.get("/readyz")
        assert report.status_code == 200, report.text  # a balancer keeps routing to it
        assert report.json()["lag"] >= 1  # what the operator watches
    three_processes.start("projector-2", "project")  # a replacement takes the dead member's partitions
    again = _context(three_processes.b, "outage", appended.json()["offset"])
    deadline = time.monotonic() + 40
    while again.status_code == 503 and time.monotonic() < deadline:
        again = _context(three_processes.b, "outage", appended.json()["offset"])
    assert again.status_code == 200, again.text
    assert [m["content"] for m in again.json()["messages"]] == ["written while no projector runs"]
    assert three_processes.a.get("/readyz").json()["lag"] == 0


def test_no_projector_on_the_embedded_log_is_refused_at_start(tmp_path: Path) -> None:
    """The embedded log is one process's: nothing else could project it."""
    env = {k: v for k, v in os.environ.items() if k != "CONVLOG_KAFKA_BOOTSTRAP"} | {"CONVLOG_DATA_DIR": str(tmp_path)}
    refused = subprocess.run(
        [sys.executable, "-m", "convlog.cli.main", *API_ONLY],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2, refused.stderr
    assert "--no-projector (CONVLOG_PROJECTOR=off) needs Kafka" in refused.stderr
    assert list(tmp_path.iterdir()) == []  # refused before it opened (or started) anything


async def test_a_projector_started_before_the_topic_exists_projects_it(
    kafka_bootstrap: str, pg_admin_url: str, tmp_path: Path
) -> None:
    """Services started together: ``convlog project`` may subscribe before any API instance
    created the topic — it creates it itself, or its group would not see it created (aiokafka
    learns of a new topic at a metadata refresh at best) and would sit idle."""
    topic = unique_topic("project-first")
    async with temporary_database(pg_admin_url) as url:
        settings = Settings(
            kafka_bootstrap=kafka_bootstrap, database_url=url, topic=topic, partitions=1, data_dir=tmp_path
        )
        await migrate(url)  # the projector's own migration finds it done: its claim can be watched at once
        stop = asyncio.Event()
        projecting = asyncio.create_task(run_projector(settings, stop))
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                for _ in range(300):  # the projector claimed the topic: it subscribes next
                    row = await (await conn.execute("SELECT topic FROM convlog.projection_versions")).fetchone()
                    if row is not None and row[0] == topic:
                        break
                    assert not projecting.done(), projecting
                    await asyncio.sleep(0.1)
                await asyncio.sleep(2)  # its consumer is in the group by now
                log = await KafkaEventLog.connect(bootstrap=kafka_bootstrap, topic=topic, partitions=1)
                try:
                    appended = await ConversationProducer(log).append_user(ConversationKey("acme", "u", "c"), "hi")
                finally:
                    await log.close()
                position = 0
                for _ in range(200):
                    query = "SELECT coalesce(max(next_offset), 0) FROM convlog_read_models_v1.positions"
                    position = (await (await conn.execute(query)).fetchone() or (0,))[0]
                    if position > appended.offset:
                        break
                    await asyncio.sleep(0.1)
            assert position > appended.offset, "the projector never projected the topic created after it started"
        finally:
            stop.set()
            await projecting
