"""What the window and summary policy does to a user's bill: the cacheable prefix.

A 200-turn conversation in the style of seed 000 (a system prompt, the offline summarizer on,
the window's hysteresis as configured — the defaults unless ``--max-turns``/``--keep-turns``)
goes through the API as a chat app runs it: append the question, read the context
(read-your-writes), append the answer, and let the summarizer catch up before the next
question (a person reads the answer; a summary call takes about a second — without the wait
the figure depended on how far the summarizer lagged, 0.65 to 0.85 run to run). For each
context, the ``Convlog-Cacheable-Prefix-Tokens`` header says how many of its leading tokens
equal the previous context's — what a provider's prompt cache can serve at a fraction of the
price. Next to it, in the same run, a naive last-N sliding window (the last 16 messages and the
system prompt, as LangChain's trimmers and most memory layers do) over the same turns, its
prefix computed the same way (``query_api.cache_prefix.common_prefix_tokens``).

A longer prompt costs even when cached, so the table also gives the mean context size and an
effective cost per context: uncached tokens at full price plus cached ones at 0.1 (DeepSeek,
Anthropic reads, OpenAI's newer models) or 0.5 (OpenAI's gpt-4o family) of it, against the
naive window's at the same prices.

    CONVLOG_DATABASE_URL=... python bench/cache.py [--turns N] [--max-turns M --keep-turns K]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from convlog.runtime.serve import Service, running_service
from convlog.settings import Settings
from projectors.tokens import cached_counter, model_spec, text_message_cost
from query_api.cache_prefix import common_prefix_tokens
from query_api.http import create_app
from query_api.http.routes_context import CACHEABLE_PREFIX_HEADER

TOKEN = "bench-token"  # noqa: S105 - a local benchmark's token
SYSTEM = "你是公司内部知识库助手，回答 OA 系统、考勤和审批相关的问题，回答要简洁准确。"
QUESTION = "第 {i} 个问题：加班申请提交之后，审批流程是怎样的？外包员工有什么不同？"
ANSWER = "第 {i} 个回答：正式员工由直属主管、部门经理审批；外包员工先由驻场负责人确认，再走同样的流程。"
NAIVE_LAST = 16
MODEL = "gpt-4o"
CACHED_PRICES = (0.1, 0.5)  # of the uncached price
TARGET_FRACTION = 0.8


@dataclass
class Served:
    """Per context after the first: its size and its cacheable prefix, in tokens."""

    tokens: list[int] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)

    def add(self, tokens: int, cached: int) -> None:
        self.tokens.append(tokens)
        self.cached.append(cached)

    def fraction(self) -> float:
        return statistics.mean(c / t for c, t in zip(self.cached, self.tokens, strict=True))

    def mean_tokens(self) -> float:
        return statistics.mean(self.tokens)

    def cost(self, price: float) -> float:
        """Mean effective prompt cost per context, in full-price tokens."""
        return statistics.mean(t - c + price * c for c, t in zip(self.cached, self.tokens, strict=True))


async def run(admin_url: str, turns: int, policy: dict[str, int]) -> tuple[Served, Served, float]:
    name = f"convlog_bench_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(
                database_url=make_conninfo(admin_url, dbname=name),
                data_dir=Path(tmp),
                partitions=4,
                api_tokens=f"bench:{TOKEN}",
                summarizer="on",
                **policy,
            )  # type: ignore[arg-type]
            async with running_service(settings) as service:
                transport = httpx.ASGITransport(app=create_app(service.deps))
                async with httpx.AsyncClient(
                    transport=transport, base_url="http://bench", headers={"Authorization": f"Bearer {TOKEN}"}
                ) as client:
                    return await _conversation(client, service, turns)
    finally:
        async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


async def _conversation(client: httpx.AsyncClient, service: Service, turns: int) -> tuple[Served, Served, float]:
    base = "/v1/users/u/conversations/bench"
    await client.post(f"{base}/messages", json={"role": "system", "content": SYSTEM})
    spec, count = model_spec(MODEL), cached_counter(model_spec(MODEL).encoding)

    def unit(role: str, text: str) -> tuple[str, int]:  # the naive window's units, costed as ours are
        return text, text_message_cost(role, text, spec, count)

    history: list[tuple[str, int]] = []
    ours, naive = Served(), Served()
    previous_naive: list[tuple[str, int]] | None = None
    started = time.perf_counter()
    for i in range(turns):
        question, answer = QUESTION.format(i=i), ANSWER.format(i=i)
        appended = (await client.post(f"{base}/messages", json={"role": "user", "content": question})).json()
        r = await client.get(
            f"{base}/context", params={"model": MODEL, "budget_tokens": 8000, "min_offset": appended["offset"]}
        )
        assert r.status_code == 200, r.text
        if CACHEABLE_PREFIX_HEADER in r.headers:
            ours.add(r.json()["token_count"], int(r.headers[CACHEABLE_PREFIX_HEADER]))
        history.append(unit("user", question))
        window = [unit("system", SYSTEM), *history[-NAIVE_LAST:]]
        if previous_naive is not None:
            naive.add(spec.reply_priming + sum(t for _, t in window), common_prefix_tokens(previous_naive, window))
        previous_naive = window
        done = (await client.post(f"{base}/messages", json={"role": "assistant", "content": answer})).json()
        history.append(unit("assistant", answer))
        await _summarizer_past(service, done["partition"], done["offset"])
    return ours, naive, time.perf_counter() - started


async def _summarizer_past(service: Service, partition: int, offset: int) -> None:
    """Until the summarizer handled the record at ``offset`` (and recorded, and saw projected,
    any summary it made of it)."""
    assert service.summarizer is not None
    positions = service.summarizer.stats.positions
    deadline = time.monotonic() + 30
    while positions.get(partition, 0) <= offset:
        if time.monotonic() > deadline:
            raise SystemExit(f"the summarizer did not reach {partition}:{offset} in 30 s")
        await asyncio.sleep(0.002)


def table(ours: Served, naive: Served, policy: str) -> str:
    fraction = ours.fraction()
    rows = [
        ("| figure | value | target | met |", "|---|---|---|---|"),
        (
            f"| mean cacheable-prefix fraction, convlog ({policy}) | {fraction:.3f} | ≥ {TARGET_FRACTION} "
            f"| {'yes' if fraction >= TARGET_FRACTION else 'NO'} |",
            f"| mean cacheable-prefix fraction, naive last-{NAIVE_LAST} window | {naive.fraction():.3f} | — | — |",
            f"| mean context tokens, convlog / naive | {ours.mean_tokens():.0f} / {naive.mean_tokens():.0f} "
            f"({ours.mean_tokens() / naive.mean_tokens():.2f} ×) | — | — |",
        ),
    ]
    lines = [line for group in rows for line in group]
    for price in CACHED_PRICES:
        a, b = ours.cost(price), naive.cost(price)
        lines.append(
            f"| effective cost per context, cached at {price} × (full-price tokens), convlog / naive "
            f"| {a:.0f} / {b:.0f} ({a / b:.2f} ×) | — | — |"
        )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--max-turns", type=int, help="CONVLOG_WINDOW_MAX_TURNS (default: the settings' default)")
    parser.add_argument("--keep-turns", type=int, help="CONVLOG_WINDOW_KEEP_TURNS (default: the settings' default)")
    args = parser.parse_args()
    admin = os.environ.get("CONVLOG_DATABASE_URL")
    if not admin:
        raise SystemExit("set CONVLOG_DATABASE_URL (make services-up)")
    policy = {k: v for k, v in (("window_max_turns", args.max_turns), ("window_keep_turns", args.keep_turns)) if v}
    ours, naive, took = await run(admin, args.turns, policy)
    used = Settings(**policy).window_policy()  # type: ignore[arg-type]
    print(f"\nturns: {args.turns}, {took:.1f} s\n")
    print(table(ours, naive, f"window {used.max_turns}→{used.keep_turns} turns + summary"))


if __name__ == "__main__":
    asyncio.run(main())
