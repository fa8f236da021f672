"""``make demo`` / ``convlog demo``: append three conversations to the log and print them back."""

from __future__ import annotations

import asyncio
import shlex
from datetime import UTC, datetime

from pydantic import SecretStr

from convlog.demo.claude import append_claude_conversation, print_claude_contexts
from convlog.demo.data import (
    INTERRUPTED_ANSWER,
    INTERRUPTED_QUESTION,
    OA_FOLLOW_UP_TURNS,
    OA_SYSTEM_PROMPT,
    OA_TURNS,
    TOOLS_ANSWER,
    TOOLS_ASSISTANT_CALLS,
    TOOLS_RESULTS,
    TOOLS_SYSTEM_PROMPT,
    TOOLS_USER_QUESTION,
)
from convlog.render import preview, print_conversation_events
from convlog.runtime.serve import Service, running_service
from convlog.settings import Settings
from events.keys import ConversationKey
from events.producer import Appended, ConversationProducer
from projectors.tokens import cached_counter, model_spec
from query_api.context import assemble
from query_api.context_types import ContextRequest, ReasoningPolicy

DEMO_TOKEN = "demo-token"  # noqa: S105 - the demo's local API token, printed for curl


async def append_oa_conversation(producer: ConversationProducer, key: ConversationKey) -> list[Appended]:
    done = [
        await producer.start_conversation(key, title="OA 加班申请"),
        await producer.append_system(key, OA_SYSTEM_PROMPT),
    ]
    for question, answer in OA_TURNS:
        done.append(await producer.append_user(key, question))
        done.append(await producer.append_assistant(key, answer, model="gpt-4o-mini", finish_reason="stop"))
    return done


async def append_oa_follow_ups(producer: ConversationProducer, key: ConversationKey) -> list[Appended]:
    """Past the window's twelve turns: the 13th moves it, and turns 1-9 get summarized."""
    done = []
    for question, answer in OA_FOLLOW_UP_TURNS:
        done.append(await producer.append_user(key, question))
        done.append(await producer.append_assistant(key, answer, model="gpt-4o-mini", finish_reason="stop"))
    return done


async def append_tools_conversation(producer: ConversationProducer, key: ConversationKey) -> list[Appended]:
    done = [
        await producer.start_conversation(key, title="加班时长查询"),
        await producer.append_system(key, TOOLS_SYSTEM_PROMPT),
        await producer.append_user(key, TOOLS_USER_QUESTION),
        await producer.append_message(key, {"role": "assistant", "content": None, **TOOLS_ASSISTANT_CALLS}),
    ]
    for call_id, name, result in TOOLS_RESULTS:
        done.append(await producer.append_tool_result(key, tool_call_id=call_id, name=name, content=result))
    done.append(await producer.append_message(key, {"role": "assistant", **TOOLS_ANSWER}))
    done.append(await producer.append_user(key, INTERRUPTED_QUESTION))
    done.append(
        await producer.append_assistant(key, INTERRUPTED_ANSWER, model="deepseek-v4", finish_reason="interrupted")
    )
    return done


async def run_demo(settings: Settings) -> None:
    run = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    oa_key = ConversationKey("acme", "employee-42", f"oa-overtime-{run}")
    tools_key = ConversationKey("acme", "employee-42", f"hr-tools-{run}")
    claude_key = ConversationKey("acme", "employee-42", f"travel-claude-{run}")
    where = settings.kafka_bootstrap or str(settings.embedded_log_path)
    print(f"convlog demo — log: {where}; read models: {settings.database_url or 'embedded Postgres'}\n")
    if settings.api_tokens is None:  # the demo's token, unless the operator configured their own
        settings = settings.model_copy(update={"api_tokens": SecretStr(f"acme:{DEMO_TOKEN}")})
    # The demo waits for its own projector (an API-only setting would leave it waiting for none).
    settings = settings.model_copy(update={"projector": "on"})
    async with running_service(settings) as service:
        producer = service.deps.producer
        event_log = service.deps.queries.log
        oa_appended = await append_oa_conversation(producer, oa_key) + await append_oa_follow_ups(producer, oa_key)
        written = [
            (oa_key, oa_appended),
            (tools_key, await append_tools_conversation(producer, tools_key)),
            (claude_key, await append_claude_conversation(producer, claude_key)),
        ]
        for key, appended in written:
            await print_conversation_events(event_log, key, start_offset=appended[0].offset)
        await _caught_up(service, {a.partition: a.offset for _, appended in written for a in appended})
        await print_summary(service, oa_key)
        await print_context(service, oa_key, model="gpt-4o-mini", budget_tokens=1200)
        await print_context(service, tools_key, model="deepseek-v4", budget_tokens=4000, reasoning="tool_turns")
        await print_claude_contexts(service, claude_key)
    print_try_it(oa_key, settings)
    print_stop_hint(settings)


async def _caught_up(service: Service, offsets: dict[int, int]) -> None:
    assert service.projector is not None  # the demo runs embedded: the projector is in the service
    for _ in range(600):
        if all(service.projector.positions.get(p, 0) > o for p, o in offsets.items()):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError("the projector did not catch up within 30 s")


async def print_summary(service: Service, key: ConversationKey) -> None:
    """Wait for the summarizer to fold the turns that left the OA conversation's window."""
    reads = await service.deps.queries.reads()
    for _ in range(600):
        inputs = await reads.context_inputs(key, encoding="o200k_base")
        if inputs is not None and inputs.summary is not None:
            break
        await asyncio.sleep(0.05)
    else:
        print("no summary yet (the summarizer is off or behind): the turns that left the window stay raw\n")
        return
    summary = inputs.summary
    model = service.summarizer.model if service.summarizer else None
    print(
        f"running summary of {key} — covers through seq {summary.covers_through_seq}, {summary.tokens} tokens"
        f"{f', by {model.model} ({model.prompt_version})' if model else ''}:"
    )
    for line in summary.text.splitlines():
        print(f"  {preview(line)}")
    print()


async def print_context(
    service: Service, key: ConversationKey, *, model: str, budget_tokens: int, reasoning: ReasoningPolicy = "omit"
) -> None:
    spec = model_spec(model)
    reads = await service.deps.queries.reads()
    inputs = await reads.context_inputs(key, encoding=spec.encoding)
    assert inputs is not None
    request = ContextRequest(model, budget_tokens, reserve_tokens=200, reasoning=reasoning)
    ctx = assemble(
        system=inputs.system,
        summary=inputs.summary,
        messages=inputs.messages,
        request=request,
        spec=spec,
        count=cached_counter(spec.encoding),
    )
    print(
        f"context for the next turn of {key} — model {model}, budget {budget_tokens} (200 reserved), "
        f"reasoning={reasoning}"
    )
    print(
        f"  window starts at seq {inputs.window_start}; summary: {'yes' if ctx.compressed else 'none yet'}; "
        f"{ctx.dropped_turns} oldest turn(s) dropped for the budget; {ctx.token_count} tokens ({ctx.encoding}"
        f"{', estimated' if spec.estimated else ''})"
    )
    for message in ctx.messages:
        extras = []
        if message.get("tool_calls"):
            extras.append("calls " + ", ".join(c["function"]["name"] for c in message["tool_calls"]))
        if message.get("tool_call_id"):
            extras.append(f"answers {message['tool_call_id']}")
        if message.get("reasoning_content"):
            extras.append("with reasoning")
        text = message.get("content") if isinstance(message.get("content"), str) else ""
        suffix = f"  [{'; '.join(extras)}]" if extras else ""
        print(f"  {message['role']:<9} {preview(text)}{suffix}")
    print()


def _as_set(settings: Settings) -> str:
    """The variables a command needs to find what the demo used: its data dir, unless the default."""
    default = Settings.model_fields["data_dir"].default
    return "" if settings.data_dir == default else f"CONVLOG_DATA_DIR={shlex.quote(str(settings.data_dir))} "


def print_try_it(key: ConversationKey, settings: Settings) -> None:
    host = f"[{settings.http_host}]" if ":" in settings.http_host else settings.http_host
    root = f"http://{host}:{settings.http_port}/v1/users/{key.user_id}/conversations"
    base = f"{root}/{key.conversation_id}"
    auth = f'-H "Authorization: Bearer {DEMO_TOKEN}"'
    print("Try the API: start it with")
    print(f"  {_as_set(settings)}CONVLOG_API_TOKENS=acme:{DEMO_TOKEN} .venv/bin/convlog serve")
    print("then")
    print(f"  curl -s {auth} '{base}/context?model=gpt-4o-mini&budget_tokens=1200' | python3 -m json.tool")
    print(f"  curl -s {auth} -H 'Content-Type: application/json' -X POST '{base}/messages' \\")
    print('       -d \'{"role": "user", "content": "审批通过后多久能调休？"}\'')
    print(f"  curl -s {auth} '{base}/messages?limit=5' | python3 -m json.tool")
    print(
        f"  curl -s {auth} '{base}/context?model=claude-sonnet-4-5&budget_tokens=1200&format=anthropic&cache=true'"
        " | python3 -m json.tool"
    )
    print(f"  curl -s {auth} '{root}' | python3 -m json.tool")


def print_stop_hint(settings: Settings) -> None:
    if settings.database_url:
        return  # not ours to stop
    print(
        "\nThe embedded Postgres keeps running for the next command (its data stays in "
        f"{settings.data_dir}/postgres). When you are done:"
    )
    print(f"  {_as_set(settings)}.venv/bin/convlog stop")


def main(settings: Settings | None = None) -> None:
    asyncio.run(run_demo(settings or Settings.from_env()))
