"""Golden vectors for producers in other languages: ``python -m tests.vectors`` writes
``schemas/vectors/events.json`` and ``schemas/vectors/keys.json`` from convlog's own codec and
partitioner (``tests/test_vectors.py`` checks the committed files equal what it writes now).

``events.json`` is one conversation turn, as the examples in ``examples/`` write it with fixed
event ids and times (``events``), and more records of every shape (``more_events``): per event
its Avro record in JSON (the fields of the newest ``schemas/event.vN.avsc``; a union of several
named types — the body, a block, a content part — as ``{"convlog.events.Name": {...}}``, a
``["null", T]`` union as the value or null, ``occurred_at`` as microseconds), its key, its
headers and the exact bytes of its record value (Avro single-object encoding) in hex.
``keys.json`` is key → murmur2 → partition for several partition counts, with keys that need
escaping and non-ASCII ones.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from events.blocks import native_message
from events.codec import default_codec
from events.event_types import (
    ConversationCleared,
    ConversationErased,
    ConversationStarted,
    Event,
    EventBody,
    ImagePart,
    MediaBlock,
    MessageAppended,
    MessageRedacted,
    OpaqueBlock,
    ReasoningBlock,
    TextBlock,
    TextPart,
    ToolCall,
    ToolCallBlock,
    Usage,
)
from events.keys import ConversationKey, murmur2, partition_for_key
from events.producer import EVENT_TYPE_HEADER
from events.validation import validate_event

REPO: Final = Path(__file__).resolve().parents[1]
VECTORS: Final = REPO / "schemas" / "vectors"
EVENTS_FILE: Final = VECTORS / "events.json"
KEYS_FILE: Final = VECTORS / "keys.json"

# The turn's fixed inputs: every example takes them as options (--event-id-prefix,
# --occurred-at, --producer) so that its records are these bytes exactly.
KEY: Final = ConversationKey("acme", "employee:42", "oa\\overtime")  # a key that needs escaping
EVENT_ID_PREFIX: Final = "vec"  # event i (from 1) is "vec-i"; a message's id is its event's
FIRST_OCCURRED_AT: Final = datetime(2026, 11, 30, 9, 0, 0, 123456, tzinfo=UTC)  # then one second apart
PRODUCER: Final = "convlog-vectors"
MODEL: Final = "gpt-4o"
NATIVE_MODEL: Final = "claude-sonnet-4-5"

PARTITION_COUNTS: Final = (1, 3, 12, 50, 64, 100)
KEYS: Final = (
    ("acme", "employee-42", "c-2026-11-30-1"),
    ("acme", "employee:42", "oa\\overtime"),  # a colon and a backslash: escaped
    ("a:b", "c\\:d", "e\\\\f"),  # escapes next to escapes
    ("租户", "用户", "会话"),  # multi-byte UTF-8
    ("t", "u", "c"),  # shorter than one 4-byte block of murmur2
    ("tenant-1", "user-1", "conversation-1"),
    ("tenant-1", "user-1", "conversation-2"),
    ("acme", "émilie 😀", "c 1"),  # a space, an accent and a 4-byte character
)


def turn_bodies() -> list[tuple[str, EventBody]]:
    """The turn: a start, a question, a tool call and its result, the answer, a second question,
    and a native (Anthropic-format) answer with reasoning blocks. Message ids are set later."""
    return [
        ("conversation_started", ConversationStarted(title="Overtime request", metadata={"channel": "web"})),
        ("user_message", message("user", content="How do I file an overtime request in the OA system?")),
        (
            "assistant_tool_call",
            message(
                "assistant",
                tool_calls=(ToolCall("call_1", "search_kb", '{"q": "overtime request"}'),),
                reasoning_content="The knowledge base has the procedure.",
                model=MODEL,
                usage=Usage(prompt_tokens=120, completion_tokens=18),
                finish_reason="tool_calls",
            ),
        ),
        (
            "tool_result",
            message("tool", content='{"hits": 3, "top": "OA > Attendance > Overtime"}', tool_call_id="call_1"),
        ),
        (
            "assistant_answer",
            message(
                "assistant",
                content="Open OA, then Attendance > Overtime, and submit the form.",
                model=MODEL,
                usage=Usage(prompt_tokens=160, completion_tokens=24, cached_tokens=64),
                finish_reason="stop",
                metadata={"app": "oa-assistant"},
            ),
        ),
        ("user_follow_up", message("user", content="And on a public holiday?")),
        (
            "native_assistant_with_reasoning",
            native_message(
                message_id="",
                role="assistant",
                blocks=(
                    ReasoningBlock(text="Holiday overtime has a form of its own.", signature="EqQBCgIYAhIM"),
                    ReasoningBlock(redacted_data="RXJhc2VkIHJlYXNvbmluZw=="),
                    TextBlock("Use Attendance > Holiday overtime instead: it is paid double."),
                ),
                provider="anthropic",
                api="anthropic",
                model=NATIVE_MODEL,
                usage=Usage(prompt_tokens=410, completion_tokens=52, cached_tokens=256, cache_write_tokens=90),
                finish_reason="stop",
            ),
        ),
    ]


def more_bodies() -> list[tuple[str, EventBody]]:
    """Records beyond the turn, for a producer's encoder to be tested on every shape: a content of
    parts (text and image), the other body types (an erase with schema v5's subject and
    requested_by among them), and native blocks of every kind with their optional fields. Not
    one conversation's story: each is checked on its own."""
    return [
        (
            "user_message_with_image_parts",
            message(
                "user",
                content=(TextPart("What does this form say?"), ImagePart("https://example.com/f.png", "high")),
                name="employee_42",
                metadata={"locale": "zh-CN"},
            ),
        ),
        ("system_message", message("system", content="You are the OA assistant.")),
        (
            "interrupted_assistant",
            message(
                "assistant",
                content="Open OA, then",
                finish_reason="interrupted",
                thinking_duration_ms=1200,
                usage=Usage(reasoning_tokens=40),
            ),
        ),
        (
            "native_responses_assistant",
            native_message(
                message_id="",
                role="assistant",
                blocks=(
                    ReasoningBlock(summary=("Looked up the form.",), encrypted_content="gAAAAB", item_id="rs_01"),
                    TextBlock("Here it is.", item_id="msg_01", extra='{"annotations":[]}'),
                    ToolCallBlock("call_2", "open_form", '{"form":"overtime"}', item_id="fc_01"),
                ),
                provider="openai",
                api="responses",
                model="gpt-5",
            ),
        ),
        (
            "native_tool_result_error",
            native_message(
                message_id="",
                role="tool",
                blocks=(TextBlock("form not found"),),
                api="responses",
                tool_call_id="call_2",
                is_error=True,
            ),
        ),
        (
            "native_gemini_media_and_opaque",
            native_message(
                message_id="",
                role="user",
                blocks=(
                    MediaBlock("image", data="iVBORw0KGgo=", media_type="image/png"),
                    MediaBlock(
                        "file",
                        url="https://example.com/policy.pdf",
                        media_type="application/pdf",
                        filename="policy.pdf",
                    ),
                    OpaqueBlock("google", '{"executableCode":{"code":"print(1)"}}'),
                    TextBlock("Is this the policy?"),
                ),
                provider="google",
                api="gemini",
            ),
        ),
        ("message_redacted", MessageRedacted(message_id="vec-2", reason="personal data")),
        ("conversation_cleared", ConversationCleared(reason="new chat")),
        ("conversation_erased", ConversationErased(reason="user request", only_if_last_offset=41)),
        (
            "user_erased",  # schema v5: one of a user's erases, and who asked for it
            ConversationErased(reason="user request", subject="user", requested_by="tok_support_7"),
        ),
    ]


def message(role: Any, **fields: Any) -> MessageAppended:
    return MessageAppended(message_id="", role=role, **fields)


def turn_events() -> list[tuple[str, Event]]:
    return _events(turn_bodies(), EVENT_ID_PREFIX, FIRST_OCCURRED_AT)


def more_events() -> list[tuple[str, Event]]:
    return _events(more_bodies(), f"{EVENT_ID_PREFIX}-more", FIRST_OCCURRED_AT + timedelta(hours=1))


def _events(bodies: list[tuple[str, EventBody]], prefix: str, first: datetime) -> list[tuple[str, Event]]:
    events = []
    for i, (name, template) in enumerate(bodies, start=1):
        event_id = f"{prefix}-{i}"
        body = dataclasses.replace(template, message_id=event_id) if isinstance(template, MessageAppended) else template
        at = first + timedelta(seconds=i - 1)
        event = Event(event_id, KEY, at, PRODUCER, body)
        validate_event(event)  # what convlog's producer would refuse is no vector
        events.append((name, event))
    return events


def json_value(value: Any, optional: frozenset[str]) -> Any:
    """fastavro's record shapes as JSON: a (name, record) union branch becomes {name: record},
    except in a ``["null", T]`` union (``optional`` names those T), where it is the record."""
    if isinstance(value, tuple):
        name, inner = value
        return json_value(inner, optional) if name in optional else {name: json_value(inner, optional)}
    if isinstance(value, dict):
        return {k: json_value(v, optional) for k, v in value.items()}
    if isinstance(value, list):
        return [json_value(v, optional) for v in value]
    return value


_PRIMITIVES: Final = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def optional_named_types(schema: Any, namespace: str = "") -> frozenset[str]:
    """The full names of the named types that stand as T in a ``["null", T]`` union."""
    found: set[str] = set()

    def walk(node: Any, ns: str) -> None:
        if isinstance(node, list):
            others = [b for b in node if b != "null"]
            if len(node) == 2 and len(others) == 1:
                name = others[0].get("name") if isinstance(others[0], dict) else others[0]
                if name and name not in _PRIMITIVES:
                    found.add(name if "." in name else f"{others[0].get('namespace', ns)}.{name}")
            for branch in node:
                walk(branch, ns)
        elif isinstance(node, dict):
            ns = node.get("namespace", ns)
            for key in ("type", "items", "values", "fields"):
                if key in node:
                    walk(node[key], ns)

    walk(schema, namespace)
    return frozenset(found)


def events_document() -> dict[str, Any]:
    codec = default_codec()
    schema_file = REPO / "schemas" / f"event.v{codec.version}.avsc"
    optional = optional_named_types(json.loads(schema_file.read_text(encoding="utf-8")))
    return {
        "about": "Written by `python -m tests.vectors` from convlog's codec; do not edit. See docs/producers.md.",
        "schema": str(schema_file.relative_to(REPO)),
        "schema_version": codec.version,
        "fingerprint": codec.fingerprint.hex(),
        "turn": {
            "tenant_id": KEY.tenant_id,
            "user_id": KEY.user_id,
            "conversation_id": KEY.conversation_id,
            "event_id_prefix": EVENT_ID_PREFIX,
            "first_occurred_at_micros": micros(FIRST_OCCURRED_AT),
            "occurred_at_step_micros": 1_000_000,
            "producer": PRODUCER,
        },
        "events": [vector(name, event, optional) for name, event in turn_events()],
        "more_events": [vector(name, event, optional) for name, event in more_events()],
    }


def vector(name: str, event: Event, optional: frozenset[str]) -> dict[str, Any]:
    codec = default_codec()
    return {
        "name": name,
        "key": str(event.key),
        "key_hex": event.key.encode().hex(),
        "headers": {EVENT_TYPE_HEADER: event.event_type},
        "record": json_value(codec.to_record(event), optional),
        "value_hex": codec.encode(event).hex(),
    }


def keys_document() -> dict[str, Any]:
    keys = []
    for tenant, user, conversation in KEYS:
        key = ConversationKey(tenant, user, conversation)
        raw = key.encode()
        keys.append(
            {
                "tenant_id": tenant,
                "user_id": user,
                "conversation_id": conversation,
                "key": str(key),
                "key_hex": raw.hex(),
                "murmur2": murmur2(raw),
                "partitions": {str(n): partition_for_key(raw, n) for n in PARTITION_COUNTS},
            }
        )
    return {
        "about": "Written by `python -m tests.vectors` from convlog's partitioner; do not edit. "
        "partition = (murmur2(key bytes) & 0x7fffffff) % count, Kafka's Java client's default.",
        "partition_counts": list(PARTITION_COUNTS),
        "keys": keys,
    }


def micros(at: datetime) -> int:
    delta = at - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def documents() -> dict[Path, str]:
    return {EVENTS_FILE: render(events_document()), KEYS_FILE: render(keys_document())}


def main() -> None:
    VECTORS.mkdir(exist_ok=True)
    for path, text in documents().items():
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
