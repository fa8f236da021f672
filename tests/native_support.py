"""Native (schema v4) messages for the read-model tests: an Anthropic answer with signed,
redacted and encrypted reasoning, an opaque block and parallel calls, its tool results, and the
secret strings no read model may keep once the message is redacted or erased."""

from __future__ import annotations

from events.blocks import Block, OpaqueBlock, ReasoningBlock, TextBlock, ToolCallBlock, native_message
from events.event_types import MessageAppended, Usage

SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds-sig"
REDACTED_DATA = "EmwKAhgBEgy3va3pzix-redacted-thinking"
ENCRYPTED = "gAAAAABo-encrypted-reasoning-content"
THINKING = "The user wants the weather in two cities: call get_weather twice."
OPAQUE = '{"type":"server_tool_use","id":"srvtoolu_01","name":"web_search","input":{"query":"opaque-query"}}'
CALL_SIGNATURE = "gemini-thought-signature-on-call"
NATIVE_SECRETS = (SIGNATURE, REDACTED_DATA, ENCRYPTED, THINKING, OPAQUE, "opaque-query", CALL_SIGNATURE)


def thinking_answer(message_id: str = "a1", *, call_ids: tuple[str, ...] = ("toolu_1", "toolu_2")) -> MessageAppended:
    """A Claude answer with extended thinking, redacted thinking, an opaque server tool block,
    text with citations and parallel tool calls — every block type a native message can hold."""
    blocks: tuple[Block, ...] = (
        ReasoningBlock(text=THINKING, signature=SIGNATURE),
        ReasoningBlock(redacted_data=REDACTED_DATA),
        ReasoningBlock(summary=("Weather lookup",), encrypted_content=ENCRYPTED, item_id="rs_1"),
        OpaqueBlock("anthropic", OPAQUE),
        TextBlock("Let me check both cities.", extra='{"citations":[]}'),
        *(ToolCallBlock(c, "get_weather", f'{{"city":"{c}"}}', signature=CALL_SIGNATURE) for c in call_ids),
    )
    usage = Usage(prompt_tokens=1200, completion_tokens=80, cached_tokens=1000, cache_write_tokens=150)
    return native_message(
        message_id=message_id,
        role="assistant",
        blocks=blocks,
        api="anthropic",
        provider="anthropic",
        model="claude-sonnet-4-5",
        usage=usage,
        finish_reason="tool_calls",
    )


def tool_result(call_id: str, text: str, *, message_id: str, is_error: bool | None = None) -> MessageAppended:
    return native_message(
        message_id=message_id,
        role="tool",
        blocks=(TextBlock(text),),
        api="anthropic",
        provider="anthropic",
        tool_call_id=call_id,
        is_error=is_error,
    )
