"""Context endpoint latency next to a raw indexed last-N SELECT through the same pool.

Two conversations, 100 and 10,000 messages, are appended to an embedded log and projected
into a fresh database; then the context endpoint (in-process ASGI, FastAPI included) and a raw
``SELECT ... ORDER BY seq DESC LIMIT 20`` are timed alternately. Twice: once with the
summarizer running (the offline model; timing starts when its summary covers every turn that
left the window, as in a deployment), once without (then every turn is still in the context by
design, and the 10,000-message case is not flat). With ``--formats``, the same contexts are
also served in every provider format (each with a model of that provider), and each format's
p50 is reported as a ratio to the Chat Completions path's in the same run (target <= 1.2).

Then the same data is served by a ``convlog serve`` process and timed over one kept-alive
socket, next to that server's ``/healthz`` (the HTTP floor) and the raw SELECT. Timing starts
after ``ANALYZE``, as in a deployment a minute after such a load (autovacuum's).

    CONVLOG_DATABASE_URL=... python bench/context.py [--requests N] [--formats]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psycopg
from http_path import call, serve_process  # bench/ is a script's first path entry
from psycopg import sql
from psycopg.conninfo import make_conninfo
from table import Row, print_table

from convlog.runtime.serve import Service, running_service
from convlog.settings import Settings
from events.keys import ConversationKey
from query_api.http import create_app

TOKEN = "bench-token"  # noqa: S105 - a local benchmark's token
# The model each format is served for: a provider's own, so estimated formats pay their estimate.
FORMAT_MODELS = {
    "chat_completions": "gpt-4o",
    "responses": "gpt-5",
    "anthropic": "claude-sonnet-4-5",
    "gemini": "gemini-2.5-pro",
}
BUDGET = 8000  # a typical context budget (the model's window is larger; the app keeps costs down)
TEXT = "加班申请提交之后，审批流程是直属主管、部门经理，外包员工还需要驻场负责人先确认。"


async def fill(service: Service, key: ConversationKey, messages: int) -> int:
    producer = service.deps.producer
    last = None
    for i in range(messages // 2):
        await producer.append_user(key, f"{i}: {TEXT}", message_id=f"u{i}")
        last = await producer.append_assistant(key, f"{i}: {TEXT}", message_id=f"a{i}")
    assert last is not None
    return last.offset


async def summarized(service: Service, key: ConversationKey, timeout_s: float = 300) -> None:
    """Until the summarizer's summary covers every turn that left the window."""
    reads = await service.deps.queries.reads()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        inputs = await reads.context_inputs(key, encoding="o200k_base")
        if inputs and inputs.summary and inputs.window_start == inputs.summary.covers_through_seq + 1:
            return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"the summarizer did not catch up on {key} within {timeout_s}s")


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def over_socket(
    url: str, data_dir: Path, schema: str, keys: tuple[ConversationKey, ...], requests: int
) -> dict[str, list[float]]:
    """p50 inputs over one kept-alive connection: the HTTP floor (``/healthz``), each context, and
    the raw last-20 SELECT on a connection of this process (what the target allows twice)."""
    times: dict[str, list[float]] = {"healthz": [], "sock100": [], "sock10k": [], "sraw100": [], "sraw10k": []}
    raw_query = sql.SQL("SELECT * FROM {}.transcript WHERE conversation_key = %s ORDER BY seq DESC LIMIT 20").format(
        sql.Identifier(schema)
    )
    with serve_process(url, data_dir, Path(__file__).resolve().parent.parent) as port, psycopg.connect(url) as db:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for round_ in range(requests + requests // 10):  # the first tenth warms up
            measured = round_ >= requests // 10
            started = time.perf_counter()
            assert call(conn, "GET", "/healthz")[0] == 200
            if measured:
                times["healthz"].append(time.perf_counter() - started)
            for label, key in zip(("100", "10k"), keys, strict=True):
                path = f"/v1/users/u/conversations/{key.conversation_id}/context?model=gpt-4o&budget_tokens={BUDGET}"
                started = time.perf_counter()
                status, body = call(conn, "GET", path)
                assert status == 200, body[:300]
                if measured:
                    times[f"sock{label}"].append(time.perf_counter() - started)
                started = time.perf_counter()
                db.execute(raw_query, [str(key)]).fetchall()
                if measured:
                    times[f"sraw{label}"].append(time.perf_counter() - started)
    return times


async def scenario(
    admin_url: str, requests: int, *, summarize: bool, formats: bool = False, socket: bool = False
) -> dict[str, float]:
    name = f"convlog_bench_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_conninfo(admin_url, dbname=name)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(
                database_url=url,
                data_dir=Path(tmp),
                partitions=4,
                api_tokens=f"bench:{TOKEN}",
                summarizer="on" if summarize else "off",
            )
            async with running_service(settings) as service:
                small, big = ConversationKey("bench", "u", "small"), ConversationKey("bench", "u", "big")
                offsets = [await fill(service, small, 100), await fill(service, big, 10_000)]
                if summarize:
                    await summarized(service, small)
                    await summarized(service, big)
                transport = httpx.ASGITransport(app=create_app(service.deps))
                auth = {"Authorization": f"Bearer {TOKEN}"}
                client = httpx.AsyncClient(transport=transport, base_url="http://bench", headers=auth)
                reads = await service.deps.queries.reads()
                schema = reads.schema
                for key, offset in zip((small, big), offsets, strict=True):  # wait until projected
                    r = await client.get(
                        f"/v1/users/u/conversations/{key.conversation_id}/context",
                        params={"model": "gpt-4o", "budget_tokens": 1_000_000, "min_offset": offset},
                    )
                    assert r.status_code == 200, r.text
                # The planner's statistics of the tables just loaded, as autovacuum gathers them
                # within a minute of such a load: without, it plans the summary lookup for the few
                # rows an empty table's statistics promise (a bitmap scan and sort of every summary
                # of the conversation instead of the newest by the primary key: +0.07 ms at 10,000).
                async with service.pool.connection() as conn:
                    await conn.execute("ANALYZE")
                raw_query = sql.SQL(
                    "SELECT * FROM {}.transcript WHERE conversation_key = %s ORDER BY seq DESC LIMIT 20"
                ).format(sql.Identifier(schema))
                times: dict[str, list[float]] = {"ctx100": [], "ctx10k": [], "raw100": [], "raw10k": []}
                served_formats = [f for f in FORMAT_MODELS if f != "chat_completions"] if formats else []
                for _ in range(requests):
                    for label, key in (("100", small), ("10k", big)):
                        for fmt in served_formats:
                            started = time.perf_counter()
                            r = await client.get(
                                f"/v1/users/u/conversations/{key.conversation_id}/context",
                                params={"model": FORMAT_MODELS[fmt], "budget_tokens": BUDGET, "format": fmt},
                            )
                            times.setdefault(f"{fmt}{label}", []).append(time.perf_counter() - started)
                            assert r.status_code == 200, r.text
                        started = time.perf_counter()
                        r = await client.get(
                            f"/v1/users/u/conversations/{key.conversation_id}/context",
                            params={"model": "gpt-4o", "budget_tokens": BUDGET},
                        )
                        times[f"ctx{label}"].append(time.perf_counter() - started)
                        assert r.status_code == 200
                        started = time.perf_counter()
                        async with service.pool.connection() as conn, conn.cursor() as cur:
                            await cur.execute(raw_query, [str(key)])
                            await cur.fetchall()
                        times[f"raw{label}"].append(time.perf_counter() - started)
                await client.aclose()
            if socket:  # the same data, served by `convlog serve` over a real socket
                times |= over_socket(url, Path(tmp), schema, (small, big), requests)
    finally:
        async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    return {f"{k}_{q}": percentile(v, q) * 1000 for k, v in times.items() for q in (50, 95)}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--formats", action="store_true", help="also serve every provider format")
    args = parser.parse_args()
    admin = os.environ.get("CONVLOG_DATABASE_URL")
    if not admin:
        raise SystemExit("set CONVLOG_DATABASE_URL (make services-up)")
    rows: list[Row] = []
    for summarize in (True, False):
        r = await scenario(admin, args.requests, summarize=summarize, formats=args.formats, socket=True)
        how = "summarizer on" if summarize else "no summarizer"
        for size in ("100", "10k"):
            ratio = r[f"ctx{size}_95"] / r[f"raw{size}_95"]
            rows.append(
                Row(
                    f"{how}: in-process context p95, {size} msgs / raw last-20 p95",
                    f"{r[f'ctx{size}_95']:.2f} / {r[f'raw{size}_95']:.2f} ms = {ratio:.2f}",
                    "<= 3",
                    ratio <= 3,
                )
            )
        for size in ("100", "10k"):
            allowed = r["healthz_50"] + 2 * r[f"sraw{size}_50"]
            rows.append(
                Row(
                    f"{how}: socket context p50, {size} msgs (healthz {r['healthz_50']:.2f} ms, raw "
                    f"last-20 {r[f'sraw{size}_50']:.2f} ms)",
                    f"{r[f'sock{size}_50']:.2f} ms",
                    f"<= healthz + 2 x raw = {allowed:.2f} ms",
                    r[f"sock{size}_50"] <= allowed,
                )
            )
        flat = r["sock10k_50"] / r["sock100_50"]
        if summarize:
            rows.append(Row(f"{how}: flatness, socket p50 10,000 / 100 msgs", f"{flat:.2f}", "<= 1.2", flat <= 1.2))
        else:  # every turn stays in the context by design: a figure, not a target
            rows.append(Row(f"{how}: socket p50 10,000 / 100 msgs (all turns served)", f"{flat:.2f}"))
        for fmt in (f for f in FORMAT_MODELS if args.formats and f != "chat_completions"):
            for size in ("100", "10k"):
                ratio = r[f"{fmt}{size}_50"] / r[f"ctx{size}_50"]
                rows.append(
                    Row(f"{how}: {fmt} p50 / chat_completions p50, {size} msgs", f"{ratio:.2f}", "<= 1.2", ratio <= 1.2)
                )
    print_table(f"bench/context.py ({args.requests} requests each; in-process ASGI and over a real socket)", rows)


if __name__ == "__main__":
    asyncio.run(main())
