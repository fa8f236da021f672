"""The API's promises that must not depend on the read models having caught up: a repeated
Idempotency-Key (across restarts and instances), erase and clear right after an append, and
audit reads (``/events``, ``as_of``) that cost in proportion to the conversation and equal a
fold of the log itself. Real Postgres, the embedded log; the projector runs only when a test
says so, so every test controls how far the read models lag."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from events.embedded_log import EmbeddedEventLog
from events.keys import ConversationKey, partition_for_key
from events.log import Coordinates, EventLog, ReadBatch
from events.producer import ConversationProducer
from events.reading import conversation_events
from pgstore import store as store_module
from pgstore.reads import PostgresReadModels
from projectors.tokens import model_spec
from projectors.window import WindowPolicy
from query_api.context_types import ContextRequest
from query_api.events_json import events_json
from query_api.http import ApiDeps, HttpSettings, create_app
from query_api.live import QueryService
from query_api.metrics import Metrics
from query_api.served import context_as_of, context_body
from tests.projection_support import Projection, project_all

pytestmark = pytest.mark.postgres

A = {"Authorization": "Bearer token-a"}
B = {"Authorization": "Bearer token-b"}
BASE = "/v1/users/u1/conversations"
KEY = ConversationKey("acme", "u1", "audited")


class CountingLog:
    """The embedded log, counting the records reads hand out (what an audit read costs), and
    optionally holding appends back until a gate opens (to order two instances' appends)."""

    def __init__(self, log: EmbeddedEventLog) -> None:
        self.log, self.records_read = log, 0
        self.gate: asyncio.Event | None = None
        self.waiting = asyncio.Event()

    @property
    def partition_count(self) -> int:
        return self.log.partition_count

    async def append(self, *, key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]] = ()) -> Coordinates:
        if self.gate is not None:
            self.waiting.set()
            await self.gate.wait()
        return await self.log.append(key=key, value=value, headers=headers)

    async def append_many(
        self, *, key: bytes, values: Sequence[tuple[bytes, Sequence[tuple[str, bytes]]]]
    ) -> list[Coordinates]:
        if self.gate is not None:
            self.waiting.set()
            await self.gate.wait()
        return await self.log.append_many(key=key, values=values)

    async def read(self, positions: Mapping[int, int], *, max_records: int = 1000, timeout_s: float = 1.0) -> ReadBatch:
        batch = await self.log.read(positions, max_records=max_records, timeout_s=timeout_s)
        self.records_read += len(batch.records)
        return batch

    async def end_offsets(self, partitions: Collection[int] | None = None) -> dict[int, int]:
        return await self.log.end_offsets(partitions)

    async def close(self) -> None:
        await self.log.close()


@dataclass
class Api:
    """One API instance over the shared log and read models (its own in-process memory)."""

    log: CountingLog
    projection: Projection
    client: httpx.AsyncClient
    instances: list[httpx.AsyncClient] = field(default_factory=list)

    async def another_instance(self, log: EventLog | None = None) -> httpx.AsyncClient:
        """A second API process (or this one restarted): nothing remembered in memory."""
        client = _client(_deps(log or self.log, self.projection))
        self.instances.append(client)
        return client

    async def project(self) -> None:
        await project_all(self.log.log, self.projection.store())


def _deps(log: EventLog, projection: Projection) -> ApiDeps:
    reads = PostgresReadModels(projection.pool, schema=projection.version.schema)

    async def live_reads() -> PostgresReadModels:
        return reads

    async def readiness() -> dict[str, Any]:
        return {"ready": True}

    return ApiDeps(
        queries=QueryService(log=log, reads=live_reads, metrics=Metrics()),
        producer=ConversationProducer(log, producer="convlog-api"),
        http=HttpSettings(tokens={"token-a": "acme", "token-b": "globex"}),
        readiness=readiness,
    )


def _client(deps: ApiDeps) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(deps)), base_url="http://convlog")


@pytest.fixture
async def api(projection: Projection, log: EmbeddedEventLog) -> AsyncIterator[Api]:
    counting = CountingLog(log)
    async with _client(_deps(counting, projection)) as client:
        api = Api(counting, projection, client)
        yield api
        for other in api.instances:
            await other.aclose()


async def post(client: httpx.AsyncClient, conversation: str, message: dict[str, Any], key: str | None = None) -> Any:
    headers = {**A, **({"Idempotency-Key": key} if key else {})}
    return await client.post(f"{BASE}/{conversation}/messages", json=message, headers=headers)


async def log_end(api: Api) -> int:
    return sum((await api.log.end_offsets()).values())


# --- item 4: Idempotency-Key ------------------------------------------------------------------


async def test_a_repeated_key_answers_the_first_append_and_another_body_is_409(api: Api) -> None:
    hello, other = {"role": "user", "content": "hello"}, {"role": "user", "content": "something else"}
    first = await post(api.client, "c", hello, "req-1")
    assert first.status_code == 202, first.text
    appended = await log_end(api)

    async def check(client: httpx.AsyncClient) -> None:
        again = await post(client, "c", hello, "req-1")
        assert again.status_code == 202, again.text
        assert again.json() == first.json()  # the first append's coordinates, not a new offset
        refused = await post(client, "c", other, "req-1")
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["code"] == "idempotency_key_reused"
        assert (error["partition"], error["offset"]) == (first.json()["partition"], first.json()["offset"])
        assert await log_end(api) == appended  # nothing appended

    await check(api.client)  # the same instance: it remembers
    await check(await api.another_instance())  # a restart or another instance, not projected yet: the log's tail
    await api.project()
    await check(await api.another_instance())  # projected: the event index, then the record in the log
    # Keys belong to a conversation; and a key-less append is always a new event.
    assert (await post(api.client, "d", other, "req-1")).status_code == 202
    assert (await post(api.client, "c", other)).status_code == 202
    await api.project()
    page = (await api.client.get(f"{BASE}/c/messages", headers=A)).json()["messages"]
    assert (page[0]["event_id"], page[0]["content"]) == ("req-1", "hello")
    assert [m["content"] for m in page] == ["hello", "something else"]


async def test_concurrent_requests_with_one_key_append_once(api: Api) -> None:
    bodies = [{"role": "user", "content": "a" if i % 2 else "b"} for i in range(10)]
    answers = await asyncio.gather(*(post(api.client, "c", b, "same") for b in bodies))
    assert await log_end(api) == 1
    won = [r for r in answers if r.status_code == 202]
    assert {r.status_code for r in answers} == {202, 409}
    assert len({(r.json()["partition"], r.json()["offset"]) for r in won}) == 1
    contents = {b["content"] for b, r in zip(bodies, answers, strict=True) if r.status_code == 202}
    assert len(contents) == 1  # every 202 is for the body that was appended


@pytest.mark.parametrize("same_body", [True, False])
async def test_two_instances_racing_with_one_key_agree_on_the_first_record(api: Api, same_body: bool) -> None:
    """Instance 2 looks the key up and finds nothing; instance 1 appends before instance 2 does.
    The log orders them: instance 2 answers with instance 1's record (or 409), and the
    projections keep only the first."""
    slow = CountingLog(api.log.log)
    slow.gate = asyncio.Event()
    second = await api.another_instance(slow)
    mine = {"role": "user", "content": "first"}
    theirs = mine if same_body else {"role": "user", "content": "second"}
    late = asyncio.create_task(post(second, "c", theirs, "race"))
    await asyncio.wait_for(slow.waiting.wait(), 10)  # instance 2 looked up and is about to append
    early = await post(api.client, "c", mine, "race")
    assert early.status_code == 202
    slow.gate.set()
    answer = await late
    if same_body:
        assert answer.status_code == 202
        assert answer.json() == early.json()
    else:
        assert answer.status_code == 409
        assert answer.json()["error"]["offset"] == early.json()["offset"]
    await api.project()
    page = (await api.client.get(f"{BASE}/c/messages", headers=A)).json()["messages"]
    assert [m["content"] for m in page] == ["first"]


TURN = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": "q2"}]


async def test_a_repeated_list_answers_the_first_batch_on_any_instance(api: Api) -> None:
    first = await api.client.post(f"{BASE}/c/messages", json=TURN, headers={**A, "Idempotency-Key": "batch"})
    assert first.status_code == 202, first.text
    appended = await log_end(api)

    async def check(client: httpx.AsyncClient) -> None:
        again = await client.post(f"{BASE}/c/messages", json=TURN, headers={**A, "Idempotency-Key": "batch"})
        assert (again.status_code, again.json()) == (202, first.json())
        shorter = await client.post(f"{BASE}/c/messages", json=TURN[:2], headers={**A, "Idempotency-Key": "batch"})
        assert shorter.status_code == 409, shorter.text
        assert await log_end(api) == appended

    await check(await api.another_instance())  # not projected yet: found in the log's tail
    await api.project()
    await check(await api.another_instance())  # projected: the event index, then the records in the log


@pytest.mark.parametrize("same_body", [True, False])
async def test_two_instances_racing_with_one_key_agree_on_the_first_batch(api: Api, same_body: bool) -> None:
    slow = CountingLog(api.log.log)
    slow.gate = asyncio.Event()
    second = await api.another_instance(slow)
    theirs = TURN if same_body else TURN[:2]
    late = asyncio.create_task(second.post(f"{BASE}/c/messages", json=theirs, headers={**A, "Idempotency-Key": "r"}))
    await asyncio.wait_for(slow.waiting.wait(), 10)
    early = await api.client.post(f"{BASE}/c/messages", json=TURN, headers={**A, "Idempotency-Key": "r"})
    assert early.status_code == 202
    slow.gate.set()
    answer = await late
    if same_body:
        assert (answer.status_code, answer.json()) == (202, early.json())
    else:
        assert answer.status_code == 409
        assert answer.json()["error"]["offset"] == early.json()["messages"][0]["offset"]
    await api.project()
    page = (await api.client.get(f"{BASE}/c/messages", headers=A)).json()["messages"]
    assert [m["content"] for m in page] == ["q", "a", "q2"]


# --- item 5: erase and clear right after an append --------------------------------------------


@pytest.mark.parametrize("action", ["erase", "clear"])
async def test_erase_and_clear_right_after_an_append_are_accepted(api: Api, action: str) -> None:
    first = await post(api.client, "fresh", {"role": "user", "content": "forget me"})
    assert first.status_code == 202

    async def request(headers: Mapping[str, str], conversation: str) -> httpx.Response:
        if action == "erase":
            return await api.client.delete(f"{BASE}/{conversation}", headers=headers)
        return await api.client.post(f"{BASE}/{conversation}/clear", headers=headers)

    # the read models have not seen the conversation yet: the log decides
    accepted = await request(A, "fresh")
    assert accepted.status_code == 202, accepted.text
    assert (await request(B, "fresh")).status_code == 404  # another tenant's: no existence leak
    assert (await request(A, "never")).status_code == 404
    ends = await log_end(api)
    await api.project()
    assert (await request(A, "fresh")).status_code == 202  # and once projected, as before
    assert await log_end(api) == ends + 1
    page = (await api.client.get(f"{BASE}/fresh/messages", headers=A)).json()["messages"]
    if action == "erase":
        assert page[0]["content"] is None
        assert page[0]["erased_at"] is not None
    else:
        assert page[0]["content"] == "forget me"


# --- item 8: audit reads in proportion to the conversation ------------------------------------


def neighbours(count: int) -> list[ConversationKey]:
    """Conversations of the same tenant and user on KEY's partition (4 partitions)."""
    partition = partition_for_key(KEY.encode(), 4)
    found: list[ConversationKey] = []
    i = 0
    while len(found) < count:
        candidate = ConversationKey("acme", "u1", f"other-{i}")
        if partition_for_key(candidate.encode(), 4) == partition:
            found.append(candidate)
        i += 1
    return found


async def crowded_conversation(producer: ConversationProducer, *, turns: int, others_between: int) -> list[int]:
    """KEY's turns, each after ``others_between`` records of other conversations on its
    partition, with a redaction, a repeated event id and a clear. Returns KEY's offsets."""
    others = neighbours(8)
    offsets: list[int] = []
    for turn in range(turns):
        filler = [
            producer.append_user(others[(turn + i) % len(others)], f"noise {turn}.{i}") for i in range(others_between)
        ]
        await asyncio.gather(*filler)  # one fsync for the lot
        q = await producer.append_user(KEY, f"question {turn}", event_id=f"q{turn}")
        a = await producer.append_assistant(KEY, f"answer {turn}", finish_reason="stop")
        offsets += [q.offset, a.offset]
        if turn == 1:
            offsets.append((await producer.append_user(KEY, "question 1 again", event_id="q1")).offset)
            offsets.append((await producer.redact(KEY, q.message_id or "", reason="pii")).offset)
        if turn == turns - 2:
            offsets.append((await producer.clear(KEY)).offset)
    return offsets


async def scanned_fold(log: EventLog, point: int) -> dict[str, Any]:
    """The as_of context from a plain scan of the whole partition: the reference."""
    spec = model_spec("gpt-4o", default_encoding="o200k_base")
    request = ContextRequest("gpt-4o", 5000, 0, 0, "omit", 2)
    served = await context_as_of(
        log, KEY, point, request=request, spec=spec, policy=WindowPolicy(), max_event_bytes=1 << 20, start_offset=0
    )
    assert served is not None
    return context_body(*served, spec)


async def test_audit_reads_equal_a_fold_of_the_log_and_cost_the_conversation_only(api: Api) -> None:
    producer = ConversationProducer(api.log.log, producer="test")
    offsets = await crowded_conversation(producer, turns=6, others_between=150)
    await api.project()
    # a few more, not projected yet: read by scanning past the projection's position
    offsets.append((await producer.append_user(KEY, "late question")).offset)
    await asyncio.gather(*(producer.append_user(other, "late noise") for other in neighbours(8)))
    offsets.append((await producer.append_assistant(KEY, "late answer", finish_reason="stop")).offset)

    scan = [pair async for pair in conversation_events(api.log.log, KEY)]
    assert [r.offset for r, _ in scan] == offsets
    api.log.records_read = 0
    events = await api.client.get(f"{BASE}/audited/events", headers=A)
    assert events.status_code == 200, events.text
    assert events.json()["events"] == events_json(scan)
    assert '"question 1"' not in events.text  # the redaction still applies
    assert "question 1 again" not in events.text
    # Cost: the conversation's own records and the tail after the projection's position (8
    # records of others) — not the ~900 records of others before it (today's scan read 775).
    assert api.log.records_read == len(offsets) + 8, api.log.records_read

    for point in [*offsets[::3], offsets[-1]]:
        api.log.records_read = 0
        params: dict[str, Any] = {"model": "gpt-4o", "budget_tokens": 5000, "as_of": point}
        response = await api.client.get(f"{BASE}/audited/context", params=params, headers=A)
        assert response.status_code == 200, response.text
        assert response.json() == await scanned_fold(api.log.log, point)
        assert api.log.records_read == len(offsets) + 8, api.log.records_read


async def _nothing(*_: object) -> None:
    return None


async def test_a_version_made_before_the_event_index_still_reads_exactly(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upgrade: the live version has no index; reads scan, and once a projector opens the
    version the index starts at its positions — older conversations keep being scanned."""
    producer = ConversationProducer(api.log.log, producer="test")
    await crowded_conversation(producer, turns=3, others_between=5)
    await api.projection.execute("DROP TABLE {s}.event_index, {s}.event_index_from")
    with monkeypatch.context() as previous_release:  # a projector that knew no index
        previous_release.setattr(store_module, "ensure_event_index", _nothing)
        previous_release.setattr(store_module, "write_event_index", _nothing)
        await project_all(api.log.log, api.projection.store())
    scan = [pair async for pair in conversation_events(api.log.log, KEY)]
    assert (await api.client.get(f"{BASE}/audited/events", headers=A)).json()["events"] == events_json(scan)
    await producer.append_user(neighbours(1)[0], "after the upgrade")
    await api.project()  # a new projector: creates the index from the version's positions on
    rows = await api.projection.rows("SELECT count(*), min(from_offset) FROM {s}.event_index_from")
    assert rows[0][0] >= 1
    await producer.append_user(KEY, "after the upgrade too")
    await api.project()
    scan = [pair async for pair in conversation_events(api.log.log, KEY)]
    assert (await api.client.get(f"{BASE}/audited/events", headers=A)).json()["events"] == events_json(scan)
    indexed = await api.projection.rows("SELECT count(*) FROM {s}.event_index WHERE conversation_key = %s", str(KEY))
    assert indexed[0][0] == 1  # only what was projected after the upgrade
