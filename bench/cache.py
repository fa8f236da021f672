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

``--editing``: context editing instead (docs/http-api.md, Context editing). A 100-turn agent
conversation — each turn a question, a tool call, a large tool result (~1,500 tokens, a file
read) and an answer, no summarizer — is run twice in the same service, turn by turn
interleaved (the machine's load falls on both alike): once without editing, once with
``clear_tool_results_trigger=30000&clear_tool_results_keep=3&clear_tool_results_at_least=10000``.
For each, the prompt tokens of the contexts read (one per turn, read-your-writes after the tool
result, in ``--format``), their cacheable-prefix fraction (the header) and the turn's p50 (the
four appends and the context read).

    CONVLOG_DATABASE_URL=... python bench/cache.py --editing [--turns 100] [--format anthropic]
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
from typing import Any

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


EDITING = {"clear_tool_results_trigger": 30_000, "clear_tool_results_keep": 3, "clear_tool_results_at_least": 10_000}
TOOL_RESULT = "".join(f"{k:04d}    def handler_{k}(request):  return respond(request, code={k})\n" for k in range(80))
FORMAT_MODELS = {
    "chat_completions": "gpt-4o",
    "anthropic": "claude-sonnet-4-5",
    "responses": "gpt-5",
    "gemini": "gemini-2.5-pro",
}


@dataclass
class AgentRun:
    """One conversation of the editing bench: per turn its context's tokens, cacheable prefix, turn time."""

    params: dict[str, Any]
    served: Served = field(default_factory=Served)
    total_tokens: int = 0
    turn_s: list[float] = field(default_factory=list)
    edits: int = 0


async def _agent_turn(client: httpx.AsyncClient, base: str, run: AgentRun, i: int, fmt: str) -> None:
    started = time.perf_counter()
    call = {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "read_file", "arguments": f'{{"path": "src/m{i}.py"}}'},
    }
    await client.post(f"{base}/messages", json={"role": "user", "content": f"step {i}: what does src/m{i}.py do?"})
    await client.post(f"{base}/messages", json={"role": "assistant", "content": None, "tool_calls": [call]})
    result = f"src/m{i}.py\n" + TOOL_RESULT
    last = (
        await client.post(f"{base}/messages", json={"role": "tool", "tool_call_id": call["id"], "content": result})
    ).json()
    params = {"model": FORMAT_MODELS[fmt], "format": fmt, "budget_tokens": 400_000, "min_offset": last["offset"]}
    r = await client.get(f"{base}/context", params=params | run.params)
    assert r.status_code == 200, r.text
    await client.post(f"{base}/messages", json={"role": "assistant", "content": f"src/m{i}.py defines 80 handlers."})
    run.turn_s.append(time.perf_counter() - started)
    body = r.json()
    run.total_tokens += body["token_count"]
    run.edits += bool(body["edits"])
    if CACHEABLE_PREFIX_HEADER in r.headers:
        run.served.add(body["token_count"], int(r.headers[CACHEABLE_PREFIX_HEADER]))


async def run_editing(admin_url: str, turns: int, fmt: str) -> tuple[AgentRun, AgentRun]:
    name = f"convlog_bench_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    plain, edited = AgentRun({}), AgentRun(dict(EDITING))
    fields: dict[str, Any] = {"partitions": 4, "api_tokens": f"bench:{TOKEN}", "summarizer": "off"}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(database_url=make_conninfo(admin_url, dbname=name), data_dir=Path(tmp), **fields)
            async with running_service(settings) as service:
                transport = httpx.ASGITransport(app=create_app(service.deps))
                async with httpx.AsyncClient(
                    transport=transport, base_url="http://bench", headers={"Authorization": f"Bearer {TOKEN}"}
                ) as client:
                    for i in range(turns):
                        for run in (plain, edited) if i % 2 else (edited, plain):
                            await _agent_turn(
                                client, f"/v1/users/u/conversations/agent-{bool(run.params)}", run, i, fmt
                            )
    finally:
        async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    return plain, edited


def editing_table(plain: AgentRun, edited: AgentRun, fmt: str) -> str:
    tokens = edited.total_tokens / plain.total_tokens
    fraction = edited.served.fraction()
    p50_edited, p50_plain = statistics.median(edited.turn_s) * 1000, statistics.median(plain.turn_s) * 1000
    p50 = p50_edited / p50_plain
    met = {"tokens": tokens <= 0.5, "fraction": fraction >= 0.75, "p50": p50 <= 1.1}
    yes = {k: "yes" if v else "NO" for k, v in met.items()}
    return "\n".join(
        [
            "| figure | value | target | met |",
            "|---|---|---|---|",
            f"| prompt tokens over the run ({fmt}), with editing / without | {edited.total_tokens:,} / "
            f"{plain.total_tokens:,} ({tokens:.2f} x) | <= 0.5 x | {yes['tokens']} |",
            f"| mean cacheable-prefix fraction, with editing (without) | {fraction:.3f} "
            f"({plain.served.fraction():.3f}) | >= 0.75 | {yes['fraction']} |",
            f"| turn p50 (4 appends + context), with editing / without | {p50_edited:.1f} / {p50_plain:.1f} ms "
            f"({p50:.2f} x) | <= 1.1 x | {yes['p50']} |",
            f"| contexts with edits | {edited.edits} of {len(edited.turn_s)} | | |",
        ]
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--max-turns", type=int, help="CONVLOG_WINDOW_MAX_TURNS (default: the settings' default)")
    parser.add_argument("--keep-turns", type=int, help="CONVLOG_WINDOW_KEEP_TURNS (default: the settings' default)")
    parser.add_argument("--editing", action="store_true", help="the context-editing bench (see above)")
    parser.add_argument("--format", default="chat_completions", choices=sorted(FORMAT_MODELS))
    args = parser.parse_args()
    admin = os.environ.get("CONVLOG_DATABASE_URL")
    if not admin:
        raise SystemExit("set CONVLOG_DATABASE_URL (make services-up)")
    if args.editing:
        turns = 100 if args.turns == 200 else args.turns  # the default, made this bench's
        started = time.perf_counter()
        plain, edited = await run_editing(admin, turns, args.format)
        print(f"\nagent turns: {turns}, {time.perf_counter() - started:.1f} s\n")
        print(editing_table(plain, edited, args.format))
        return
    policy = {k: v for k, v in (("window_max_turns", args.max_turns), ("window_keep_turns", args.keep_turns)) if v}
    ours, naive, took = await run(admin, args.turns, policy)
    used = Settings(**policy).window_policy()  # type: ignore[arg-type]
    print(f"\nturns: {args.turns}, {took:.1f} s\n")
    print(table(ours, naive, f"window {used.max_turns}→{used.keep_turns} turns + summary"))


if __name__ == "__main__":
    asyncio.run(main())
