"""What the window and summary policy does to a user's bill: the cacheable prefix.

A 200-turn conversation in the style of seed 000 (a system prompt, the offline summarizer on,
the window's hysteresis: max 8 turns, drop to 6) goes through the API as a chat app runs it:
append the question, read the context (read-your-writes), append the answer. For each context,
the ``Convlog-Cacheable-Prefix-Tokens`` header says how many of its leading tokens equal the
previous context's — what a provider's prompt cache can serve at a fraction of the price. Next
to it, in the same run, a naive last-N sliding window (the last 16 messages and the system
prompt, as LangChain's trimmers and most memory layers do) over the same turns, its prefix
computed the same way (``query_api.cache_prefix.common_prefix_tokens``).

    CONVLOG_DATABASE_URL=... python bench/cache.py [--turns N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from convlog.runtime.serve import running_service
from convlog.settings import Settings
from projectors.tokens import get_encoding
from query_api.cache_prefix import common_prefix_tokens
from query_api.http import create_app
from query_api.http.routes_context import CACHEABLE_PREFIX_HEADER

TOKEN = "bench-token"  # noqa: S105 - a local benchmark's token
SYSTEM = "你是公司内部知识库助手，回答 OA 系统、考勤和审批相关的问题，回答要简洁准确。"
QUESTION = "第 {i} 个问题：加班申请提交之后，审批流程是怎样的？外包员工有什么不同？"
ANSWER = "第 {i} 个回答：正式员工由直属主管、部门经理审批；外包员工先由驻场负责人确认，再走同样的流程。"
NAIVE_LAST = 16


async def run(admin_url: str, turns: int) -> tuple[list[float], list[float], float]:
    name = f"convlog_bench_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(database_url=make_conninfo(admin_url, dbname=name), data_dir=Path(tmp), partitions=4,
                                api_tokens=f"bench:{TOKEN}", summarizer="on")  # fmt: skip
            async with running_service(settings) as service:
                transport = httpx.ASGITransport(app=create_app(service.deps))
                async with httpx.AsyncClient(transport=transport, base_url="http://bench",
                                             headers={"Authorization": f"Bearer {TOKEN}"}) as client:  # fmt: skip
                    return await _conversation(client, turns)
    finally:
        async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


async def _conversation(client: httpx.AsyncClient, turns: int) -> tuple[list[float], list[float], float]:
    base = "/v1/users/u/conversations/bench"
    await client.post(f"{base}/messages", json={"role": "system", "content": SYSTEM})
    count = get_encoding("o200k_base").encode_ordinary
    history: list[tuple[str, int]] = []  # the naive window's units: (message, tokens)
    ours: list[float] = []
    naive: list[float] = []
    previous_naive: list[tuple[str, int]] | None = None
    started = time.perf_counter()
    for i in range(turns):
        question, answer = QUESTION.format(i=i), ANSWER.format(i=i)
        appended = (await client.post(f"{base}/messages", json={"role": "user", "content": question})).json()
        r = await client.get(f"{base}/context", params={"model": "gpt-4o", "budget_tokens": 8000,
                                                        "min_offset": appended["offset"]})  # fmt: skip
        assert r.status_code == 200, r.text
        if CACHEABLE_PREFIX_HEADER in r.headers:
            ours.append(int(r.headers[CACHEABLE_PREFIX_HEADER]) / r.json()["token_count"])
        history.append((question, len(count(question))))
        window = [(SYSTEM, len(count(SYSTEM))), *history[-NAIVE_LAST:]]
        if previous_naive is not None:
            naive.append(common_prefix_tokens(previous_naive, window) / sum(t for _, t in window))
        previous_naive = window
        await client.post(f"{base}/messages", json={"role": "assistant", "content": answer})
        history.append((answer, len(count(answer))))
    return ours, naive, time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    admin = os.environ.get("CONVLOG_DATABASE_URL")
    if not admin:
        raise SystemExit("set CONVLOG_DATABASE_URL (make services-up)")
    ours, naive, took = await run(admin, args.turns)
    print(f"\nturns: {args.turns}, {took:.1f} s; mean cacheable-prefix fraction of the served contexts:")
    print(f"  convlog (window 8→6 turns + running summary)  {statistics.mean(ours):.3f}  (target >= 0.8)")
    print(f"  naive last-{NAIVE_LAST} sliding window              {statistics.mean(naive):.3f}")


if __name__ == "__main__":
    asyncio.run(main())
