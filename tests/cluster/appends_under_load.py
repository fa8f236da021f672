"""Appends under load through real ``convlog serve`` processes, for the failover tests: the
serve instances, the load (producers that append through :mod:`convlog.client` and readers of
their contexts), what every try saw, and what the log holds afterwards.

A fault is a step of its own (:class:`Fault`): the load does not know what is broken, so the
same harness and assertions run with a broker killed, a projector killed or nothing at all.

Every append carries an ``Idempotency-Key`` of the test's own (``p<producer>-<seq>``), so the
acknowledged ids can be matched against the event ids the topic holds. The client retries
retriable failures with that same key; each failed try is recorded by a transport wrapped
around httpx's, since the client itself only reports the failure it gives up on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx

from convlog.client import AsyncConvlogClient, ClientError
from devservices.kafka_cluster import ClusterNode, KafkaCluster
from events.codec import default_codec
from events.kafka_log import KafkaEventLog
from tests.live_server import TOKEN, ready
from tests.support import free_port

REPO = Path(__file__).resolve().parents[2]
USERS = 4  # producers' conversations are spread over this many users


# -- the serve instances ---------------------------------------------------------------------


@dataclass(frozen=True)
class Deployment:
    """Where the instances' log and read models are: the ``CONVLOG_*`` variables they share."""

    bootstrap: str
    database_url: str
    topic: str
    partitions: int
    data_dir: Path

    def env(self, **settings: str) -> dict[str, str]:
        env = {
            **os.environ,
            "CONVLOG_KAFKA_BOOTSTRAP": self.bootstrap,
            "CONVLOG_DATABASE_URL": self.database_url,
            "CONVLOG_TOPIC": self.topic,
            "CONVLOG_PARTITIONS": str(self.partitions),
            "CONVLOG_DATA_DIR": str(self.data_dir),
            "CONVLOG_SUMMARIZER": "off",
            "CONVLOG_API_TOKENS": f"acme:{TOKEN}",
            "CONVLOG_LOG_LEVEL": "warning",
            **settings,
        }
        for key in ("CONVLOG_LLM_BASE_URL", "OPENAI_BASE_URL"):  # the offline summarizer, if any
            env.pop(key, None)
        return env

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """A one-shot ``convlog`` command (``verify --all``, ...) against the same log and database."""
        return subprocess.run(
            [sys.executable, "-m", "convlog.cli.main", *args],
            cwd=REPO,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@contextmanager
def serve_instances(deployment: Deployment, count: int, **settings: str) -> Iterator[list[str]]:
    """The base URLs of ``count`` ``convlog serve`` processes on one topic and one database,
    started one after the other (the first migrates the database and creates the topic)."""
    processes: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        urls = []
        for i in range(count):
            port, errors = free_port(), deployment.data_dir / f"serve{i}.err"
            env = deployment.env(CONVLOG_HTTP_PORT=str(port), **settings)
            with errors.open("wb") as sink:
                process = subprocess.Popen(
                    [sys.executable, "-m", "convlog.cli.main", "serve"],
                    cwd=REPO,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=sink,
                )
            processes.append((process, errors))
            deadline = time.monotonic() + 90
            while not ready(port):
                assert process.poll() is None, f"convlog serve {i} exited: {errors.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"convlog serve {i} not ready: {errors.read_text()[-3000:]}"
                time.sleep(0.2)
            urls.append(f"http://127.0.0.1:{port}")
        yield urls
    finally:
        for process, _ in processes:
            process.terminate()
        for process, _ in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


# -- what the clients saw --------------------------------------------------------------------


@dataclass(frozen=True)
class FailedTry:
    at: float  # time.monotonic() when the try ended
    method: str
    what: str  # "503 log_unavailable", "ReadTimeout", ...


class RecordingTransport(httpx.AsyncBaseTransport):
    """httpx's transport, noting every try that failed (an error status or no answer)."""

    def __init__(self, tries: list[FailedTry]) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self._tries = tries

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except httpx.TransportError as e:
            self._tries.append(FailedTry(time.monotonic(), request.method, type(e).__name__))
            raise
        if response.status_code >= 400:
            await response.aread()
            code = ""
            with contextlib.suppress(ValueError, KeyError, TypeError):
                code = " " + str(response.json()["error"]["code"])
            self._tries.append(FailedTry(time.monotonic(), request.method, f"{response.status_code}{code}"))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass(frozen=True)
class Ack:
    event_id: str
    conversation: str  # "u1/c7"
    partition: int
    offset: int
    started: float
    finished: float

    @property
    def latency_s(self) -> float:
        return self.finished - self.started


@dataclass(frozen=True)
class GaveUp:
    """An append (or context read) the client stopped retrying: what it raised."""

    event_id: str
    at: float
    error: ClientError


@dataclass(frozen=True)
class ContextRead:
    conversation: str
    partition: int
    at: float
    latency_s: float
    error: ClientError | None = None


@dataclass
class LoadRecord:
    acks: list[Ack] = field(default_factory=list)
    gave_up: list[GaveUp] = field(default_factory=list)
    failed_tries: list[FailedTry] = field(default_factory=list)
    contexts: list[ContextRead] = field(default_factory=list)

    def acks_on(self, partition: int) -> list[Ack]:
        return [a for a in self.acks if a.partition == partition]

    def busiest_partition(self) -> int:
        return Counter(a.partition for a in self.acks).most_common(1)[0][0]


# -- the load --------------------------------------------------------------------------------


class AppendLoad:
    """``producers`` conversations, each appended to in turn (user, assistant, user, ...) through
    one of ``urls`` (round robin) with ``pause_s`` between appends; ``readers`` tasks ask for the
    context of a random producer's conversation through *another* instance, with the last
    acknowledged offset as ``min_offset`` (read-your-writes across instances). Producer ``p``'s
    client waits ``timeouts_s[p % len(timeouts_s)]`` for each try (the client's default, 10 s, and
    shorter: an app that gives a try less time than a failover takes sees it fail, and retries)."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        producers: int,
        readers: int = 2,
        pause_s: float = 0.02,
        timeouts_s: Sequence[float] = (10.0,),
    ) -> None:
        self.urls, self.producers, self.readers, self.pause_s = list(urls), producers, readers, pause_s
        self.timeouts_s = list(timeouts_s)
        self.record = LoadRecord()
        self.last: dict[int, Ack] = {}  # per producer, its latest acknowledged append
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._clients: list[AsyncConvlogClient] = []

    @staticmethod
    def conversation(producer: int) -> tuple[str, str]:
        return f"u{producer % USERS}", f"c{producer}"

    def _client(self, url: str, timeout_s: float = 10.0) -> AsyncConvlogClient:
        transport = RecordingTransport(self.record.failed_tries)
        client = AsyncConvlogClient(url, token=TOKEN, timeout=timeout_s, transport=transport)
        self._clients.append(client)
        return client

    def start(self) -> None:
        for p in range(self.producers):
            self._tasks.append(asyncio.create_task(self._produce(p), name=f"producer-{p}"))
        for r in range(self.readers):
            self._tasks.append(asyncio.create_task(self._read(r), name=f"reader-{r}"))

    async def stop(self) -> None:
        self._stop.set()
        try:
            await asyncio.gather(*self._tasks)
        finally:
            for client in self._clients:
                await client.aclose()

    async def _produce(self, p: int) -> None:
        client = self._client(self.urls[p % len(self.urls)], self.timeouts_s[p % len(self.timeouts_s)])
        user, conv = self.conversation(p)
        seq = 0
        while not self._stop.is_set():
            key = f"p{p}-{seq}"
            message = {"role": "user" if seq % 2 == 0 else "assistant", "content": f"message {key}"}
            started = time.monotonic()
            try:
                result = await client.append(user, conv, message, idempotency_key=key)
            except ClientError as e:
                self.record.gave_up.append(GaveUp(key, time.monotonic(), e))
                await asyncio.sleep(0.5)  # an app would surface it; the next message is a new one
            else:
                ack = Ack(key, f"{user}/{conv}", result.partition, result.offset, started, time.monotonic())
                self.record.acks.append(ack)
                self.last[p] = ack
            seq += 1
            await asyncio.sleep(self.pause_s)

    async def _read(self, r: int) -> None:
        clients = [self._client(url) for url in self.urls]
        n = 0
        while not self._stop.is_set():
            n += 1
            acked = sorted(self.last)
            if not acked:
                await asyncio.sleep(0.1)
                continue
            p = acked[(n * 7 + r) % len(acked)]
            ack = self.last[p]
            user, conv = self.conversation(p)
            started = time.monotonic()
            try:
                await clients[(p + 1) % len(clients)].context(
                    user, conv, model="gpt-4o", budget_tokens=4000, min_offset=ack.offset
                )
            except ClientError as e:
                self.record.contexts.append(
                    ContextRead(ack.conversation, ack.partition, started, time.monotonic() - started, e)
                )
            else:
                self.record.contexts.append(
                    ContextRead(ack.conversation, ack.partition, started, time.monotonic() - started)
                )
            await asyncio.sleep(0.05)


# -- faults ----------------------------------------------------------------------------------


class Fault(Protocol):
    """What breaks during the run. ``inject`` breaks it (for ``partition``, the busiest) and
    returns when it is broken; ``heal`` repairs it. ``figures`` are what it measured itself."""

    name: str

    async def inject(self, partition: int) -> None: ...

    async def heal(self) -> None: ...

    def figures(self) -> dict[str, float | str]: ...


class NoFault:
    """Nothing breaks: the harness's own baseline."""

    name = "none"

    async def inject(self, partition: int) -> None:
        return None

    async def heal(self) -> None:
        return None

    def figures(self) -> dict[str, float | str]:
        return {}


class KillPartitionLeader:
    """kill -9 the node leading ``topic[partition]``; ``heal`` starts it again (same data).

    Measures how long the partition had no leader (from the kill until a running node leads
    it, as the cluster's metadata shows it) and how long the restarted node took to be back in
    the partition's in-sync replicas."""

    name = "kill -9 the partition's leader, restart it later"

    def __init__(self, cluster: KafkaCluster, topic: str) -> None:
        self.cluster, self.topic = cluster, topic
        self.killed: ClusterNode | None = None
        self._partition = -1
        self._figures: dict[str, float | str] = {}

    async def inject(self, partition: int) -> None:
        state = await asyncio.to_thread(self.cluster.partition, self.topic, partition)
        assert len(state.isr) >= 3, f"{self.topic}[{partition}] is not fully replicated before the kill: {state}"
        node = self.cluster.node(state.leader)
        led = [
            s.partition
            for s in (await asyncio.to_thread(self.cluster.metadata, [self.topic])).partitions
            if s.topic == self.topic and s.leader == node.node_id
        ]
        self._figures["partitions the killed node led"] = str(sorted(led))
        self.killed, self._partition = node, partition
        began = time.monotonic()
        node.kill()
        successor = await asyncio.to_thread(self.cluster.wait_for_leader, self.topic, partition, not_on=node.node_id)
        self._figures.update(
            {
                "killed node": node.node_id,
                "new leader": successor.node_id,
                "partition leaderless s": round(time.monotonic() - began, 2),
            }
        )

    async def heal(self) -> None:
        node = self.killed
        assert node is not None, "heal() before inject()"
        began = time.monotonic()
        await asyncio.to_thread(node.start)
        deadline = began + 120
        while node.node_id not in (await asyncio.to_thread(self.cluster.partition, self.topic, self._partition)).isr:
            assert time.monotonic() < deadline, f"node {node.node_id} did not rejoin the ISR of {self._partition}"
            await asyncio.sleep(0.2)
        self._figures["restarted node back in sync s"] = round(time.monotonic() - began, 2)

    def figures(self) -> dict[str, float | str]:
        return dict(self._figures)


# -- reading back ----------------------------------------------------------------------------


async def stored_event_ids(bootstrap: str, topic: str, partitions: int) -> Counter[str]:
    """How many records of ``topic`` carry each event id (the whole topic, read to its end)."""
    codec = default_codec()
    log = await KafkaEventLog.connect(bootstrap=bootstrap, topic=topic, partitions=partitions)
    try:
        ends = await log.end_offsets()
        positions = dict.fromkeys(ends, 0)
        ids: Counter[str] = Counter()
        deadline = time.monotonic() + 60
        while any(positions[p] < ends[p] for p in ends):
            assert time.monotonic() < deadline, f"could not read {topic} to its end: at {positions} of {ends}"
            batch = await log.read({p: o for p, o in positions.items() if o < ends[p]}, max_records=5000)
            for record in batch.records:
                ids[codec.decode(record.value).event_id] += 1
            positions.update({p: max(o, positions[p]) for p, o in batch.positions.items()})
        return ids
    finally:
        await log.close()


def longest_gap(acks: Sequence[Ack], *, around: float) -> float:
    """The longest time without an acknowledgement among ``acks``, from the last one before
    ``around`` (the moment of the fault) on: how long appends to their partition stalled."""
    times = sorted(a.finished for a in acks)
    before = [t for t in times if t <= around]
    after = [t for t in times if t > around]
    if not before or not after:
        return float("inf")
    following = [before[-1], *after]
    return max(b - a for a, b in itertools.pairwise(following))


def percentiles(latencies: Sequence[float]) -> dict[str, float]:
    if len(latencies) < 2:
        return {
            "p50": latencies[0] if latencies else 0.0,
            "p99": latencies[0] if latencies else 0.0,
            "max": max(latencies, default=0.0),
        }
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"p50": cuts[49], "p99": cuts[98], "max": max(latencies)}
