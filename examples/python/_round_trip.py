"""What the three native examples (``native_anthropic.py``, ``native_responses.py``,
``native_gemini.py``) share: append a provider's own payloads to a new conversation, then read it
back in each format for a model of that format's provider, saying what each kept and what it
dropped (``dropped``: what the format or model could not be sent, and why)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from convlog.client import Context, ConvlogClient

USER = "u1"
ITEMS = {"chat_completions": "messages", "anthropic": "messages", "responses": "input", "gemini": "contents"}


def round_trip(fmt: str, payloads: Sequence[Any], targets: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Context]:
    """Append ``payloads`` (each a JSON body of format ``fmt``), then read the context for every
    ``(format, model)`` of ``targets``: the contexts by target."""
    conversation = f"{fmt}-{uuid.uuid4().hex[:8]}"
    contexts = {}
    with ConvlogClient() as client:  # CONVLOG_URL and CONVLOG_TOKEN; closed at the end of the block
        print(f"convlog at {client.base_url}: conversation {conversation}")
        for payload in payloads:
            sent = client.append(USER, conversation, payload, format=fmt)
        print(f"appended {len(payloads)} {fmt} payloads (the last at offset {sent.offset})")
        for target, model in targets:
            # min_offset: wait until the last append is readable (read-your-writes)
            context = client.context(
                USER, conversation, model=model, budget_tokens=8000, format=target, min_offset=sent.offset
            )
            dropped = [f"{d.what} ({d.reason})" for d in context.dropped] or "nothing"
            key = ITEMS[target]
            print(f"{target} for {model}: {len(context.fragment[key])} {key}; dropped: {dropped}")
            contexts[target, model] = context
    return contexts
