"""``make demo`` / ``convlog demo``: append two conversations to the log and print them back."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from convlog.demo_data import (
    INTERRUPTED_ANSWER,
    INTERRUPTED_QUESTION,
    OA_SYSTEM_PROMPT,
    OA_TURNS,
    TOOLS_ANSWER,
    TOOLS_ASSISTANT_CALLS,
    TOOLS_RESULTS,
    TOOLS_SYSTEM_PROMPT,
    TOOLS_USER_QUESTION,
)
from convlog.render import print_conversation_events
from convlog.settings import Settings
from convlog.wiring import make_producer, open_event_log
from events.keys import ConversationKey
from events.producer import Appended, ConversationProducer


async def append_oa_conversation(producer: ConversationProducer, key: ConversationKey) -> list[Appended]:
    done = [
        await producer.start_conversation(key, title="OA 加班申请"),
        await producer.append_system(key, OA_SYSTEM_PROMPT),
    ]
    for question, answer in OA_TURNS:
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
    event_log = await open_event_log(settings)
    try:
        producer = make_producer(event_log, settings, producer="convlog-demo")
        where = settings.kafka_bootstrap or str(settings.embedded_log_path)
        print(f"convlog demo — appending to {where} ({event_log.partition_count} partitions)\n")
        for key, appended in (
            (oa_key, await append_oa_conversation(producer, oa_key)),
            (tools_key, await append_tools_conversation(producer, tools_key)),
        ):
            await print_conversation_events(event_log, key, start_offset=appended[0].offset)
    finally:
        await event_log.close()


def main(settings: Settings | None = None) -> None:
    asyncio.run(run_demo(settings or Settings.from_env()))
