"""Context editing over HTTP: the parameters (checked, 422 naming the one that is wrong), the
configured default (``CONVLOG_CONTEXT_EDITING``, and ``editing_defaults=ignore``), the ``edits``
field — and, for generated agent conversations, every edited context served live is valid for
its provider and is, byte for byte, the one ``as_of`` rebuilds from the log."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convlog.client import Context, ContextEdit
from convlog.runtime.serve import Service
from events.event_types import MessageAppended
from events.keys import ConversationKey
from query_api.context_editing import PLACEHOLDER
from tests.formats.every_format import validate_with_sdk
from tests.test_context_editing import agent_conversations, agent_turns

pytestmark = [pytest.mark.postgres, pytest.mark.service_settings(partitions=2, api_tokens="acme:token-a")]

A = {"Authorization": "Bearer token-a"}
TARGETS = (
    ("chat_completions", "gpt-4o"),
    ("anthropic", "claude-sonnet-4-5"),
    ("responses", "gpt-5"),
    ("gemini", "gemini-2.5-pro"),
)


async def _append(service: Service, conversation: str, history: list[MessageAppended]) -> int:
    key = ConversationKey("acme", "u1", conversation)
    offset = -1
    for body in history:
        offset = (await service.deps.producer.append(key, body)).coordinates.offset
    return offset


def _url(conversation: str) -> str:
    return f"/v1/users/u1/conversations/{conversation}/context"


async def test_the_edits_are_reported_and_the_parameters_checked(
    http_client: httpx.AsyncClient, api_service: Service
) -> None:
    last = await _append(api_service, "agent", agent_turns(6))
    params: dict[str, Any] = {"model": "gpt-4o", "budget_tokens": 100_000, "min_offset": last}
    plain = (await http_client.get(_url("agent"), params=params, headers=A)).json()
    assert plain["edits"] == []
    editing = {"clear_tool_results_trigger": 1000, "clear_tool_results_keep": 2}
    edited = (await http_client.get(_url("agent"), params=params | editing, headers=A)).json()
    assert edited["edits"] == [
        {
            "kind": "clear_tool_results",
            "cleared_tokens": plain["token_count"] - edited["token_count"],
            "messages": ["t0", "t1", "t2", "t3"],
        }
    ]
    assert [m["content"] for m in edited["messages"] if m["role"] == "tool"][:4] == [PLACEHOLDER] * 4
    read = Context.from_json(edited, cacheable_prefix=None)  # the Python client's reading of the body
    assert read.edits == (
        ContextEdit("clear_tool_results", edited["edits"][0]["cleared_tokens"], ("t0", "t1", "t2", "t3")),
    )
    assert set(read.fragment) == {"messages"}  # edits is accounting, not the request fragment
    wrongs: list[tuple[dict[str, Any], str]] = [
        ({"clear_thinking_keep_turns": 0}, "clear_thinking_keep_turns"),
        ({"clear_tool_results_trigger": -1}, "clear_tool_results_trigger"),
        ({"clear_tool_results_keep": 2}, "clear_tool_results_trigger"),  # no trigger given, none configured
        ({"clear_thinking_at_least": 10}, "clear_thinking_keep_turns"),
        (
            {"clear_tool_results_trigger": 1, "clear_tool_results_exclude": ",".join(["t"] * 101)},
            "clear_tool_results_exclude",
        ),
    ]
    for wrong, field in wrongs:
        response = await http_client.get(_url("agent"), params=params | wrong, headers=A)
        assert response.status_code == 422, (wrong, response.text)
        assert field in response.text, (wrong, response.text)


@pytest.mark.service_settings(context_editing="clear_tool_results_trigger=1000&clear_tool_results_keep=1")
async def test_the_configured_default_applies_unless_a_request_ignores_it(
    http_client: httpx.AsyncClient, api_service: Service
) -> None:
    last = await _append(api_service, "defaults", agent_turns(4))
    params: dict[str, Any] = {"model": "gpt-4o", "budget_tokens": 100_000, "min_offset": last}
    by_default = (await http_client.get(_url("defaults"), params=params, headers=A)).json()
    assert by_default["edits"][0]["messages"] == ["t0", "t1", "t2"]
    kept = (await http_client.get(_url("defaults"), params=params | {"clear_tool_results_keep": 3}, headers=A)).json()
    assert kept["edits"][0]["messages"] == ["t0"]  # the default's trigger, the request's keep
    ignored = await http_client.get(_url("defaults"), params=params | {"editing_defaults": "ignore"}, headers=A)
    assert ignored.json()["edits"] == []  # e.g. the app passes Anthropic's own context_management instead


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    history=agent_conversations,
    at_least=st.sampled_from([0, 300]),
    exclude=st.sampled_from([None, "tool_0"]),
    keep_turns=st.sampled_from([None, 1]),
)
async def test_every_edited_context_is_valid_and_equals_its_as_of(
    http_client: httpx.AsyncClient,
    api_service: Service,
    history: list[MessageAppended],
    at_least: int,
    exclude: str | None,
    keep_turns: int | None,
) -> None:
    conversation = f"c-{uuid.uuid4().hex[:12]}"
    last = await _append(api_service, conversation, history)
    editing: dict[str, Any] = {"clear_tool_results_trigger": 200, "clear_tool_results_keep": 1}
    editing["clear_tool_results_at_least"] = at_least
    if exclude is not None:
        editing["clear_tool_results_exclude"] = exclude
    if keep_turns is not None:
        editing["clear_thinking_keep_turns"] = keep_turns
    for fmt, model in TARGETS:
        for budget in (1500, 20_000):
            params = {"model": model, "budget_tokens": budget, "format": fmt, "reasoning": "tool_turns", **editing}
            live = await http_client.get(_url(conversation), params=params | {"min_offset": last}, headers=A)
            rebuilt = await http_client.get(_url(conversation), params=params | {"as_of": last}, headers=A)
            assert live.status_code in (200, 422), live.text
            assert (rebuilt.status_code, rebuilt.content) == (live.status_code, live.content), (fmt, budget)
            if live.status_code == 200:
                body = live.json()
                validate_with_sdk(fmt, body)
                assert all(e["cleared_tokens"] > 0 and e["messages"] for e in body["edits"])
