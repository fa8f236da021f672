"""Nothing a provider needs back disappears silently: every signature, redacted or encrypted
reasoning blob of a native payload that a context leaves out — on the way to another format or
another model — is listed in that context's ``dropped``, for every source and target pair of the
switch table in docs/formats.md."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.formats.test_http_formats import CASES, _blobs
from tests.test_api_in_memory import BASE, A, deps, in_memory_client

__all__ = ["deps", "in_memory_client"]  # the fixtures

TARGETS = ("chat_completions", "anthropic", "responses", "gemini")
MODELS = ("claude-sonnet-4-5", "gpt-5", "gemini-2.5-pro")
LEFT_OUT = {"reasoning", "signature", "opaque"}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES)
async def test_every_blob_left_out_is_listed_in_dropped(
    in_memory_client: httpx.AsyncClient, case: str, target: str
) -> None:
    fmt, own_model, payloads, _, _ = CASES[case]
    held: list[tuple[list[str], set[str]]] = []  # per payload: its blobs, the ids of its messages
    offset = 0
    for payload in payloads:
        r = await in_memory_client.post(f"{BASE}/c/messages", params={"format": fmt}, json=payload, headers=A)
        assert r.status_code == 202, r.text
        held.append((_blobs(payload), {m["message_id"] for m in r.json()["messages"]}))
        offset = r.json()["offset"]
    for model in (own_model, *MODELS):
        params = {"model": model, "budget_tokens": 100_000, "format": target, "min_offset": offset}
        body = (await in_memory_client.get(f"{BASE}/c/context", params=params, headers=A)).json()
        served = json.dumps({k: v for k, v in body.items() if k != "dropped"})
        listed = {d["message_id"] for d in body["dropped"] if d["what"] in LEFT_OUT}
        for blobs, ids in held:
            missing = [b for b in blobs if b not in served]
            assert not missing or ids & listed, f"{fmt} → {target} for {model}: {missing} left out, not in dropped"
