"""The key route a foreign producer seals with (docs/producers.md, Getting a data key), on the
real service: ``POST /v1/users/{u}/conversations/{c}/key`` answers ``key_id``, ``key`` and
``algorithm``, never cached; the same key until the conversation is erased, then a new one; the
token names the tenant; 401 without a token; 409 ``sealing_off`` on a service that seals
nothing. The examples that call it end to end: tests/kafka/test_foreign_sealed_projection.py."""

from __future__ import annotations

import base64
import re

import httpx
import pytest

from tests.test_api import BASE, A, caught_up, post

pytestmark = [pytest.mark.postgres, pytest.mark.service_settings(sealing=True)]
B = {"Authorization": "Bearer token-b"}  # tenant globex's token
ROUTE = f"{BASE}/employee%3A42/key"  # the ids percent-encoded as path segments


async def test_the_route_answers_the_conversations_data_key(http_client: httpx.AsyncClient) -> None:
    first = await http_client.post(ROUTE, headers=A)
    assert first.status_code == 200, first.text
    answer = first.json()
    assert sorted(answer) == ["algorithm", "key", "key_id"]
    assert answer["algorithm"] == "AES-256-GCM"
    assert re.fullmatch(r"ck_[0-9a-f]{32}", answer["key_id"])
    assert len(base64.b64decode(answer["key"], validate=True)) == 32
    assert first.headers["Cache-Control"] == "no-store"
    assert (await http_client.post(ROUTE, headers=A)).json() == answer  # the same key, asked again
    # The token names the tenant: globex's conversation of the same ids has a key of its own.
    other = (await http_client.post(ROUTE, headers=B)).json()
    assert other["key_id"] != answer["key_id"]
    assert other["key"] != answer["key"]
    for headers in ({}, {"Authorization": "Bearer nope"}):
        refused = await http_client.post(ROUTE, headers=headers)
        assert refused.status_code == 401
        assert "key" not in refused.json()


async def test_an_erased_conversation_gets_a_new_key(http_client: httpx.AsyncClient) -> None:
    before = (await http_client.post(f"{BASE}/gone/key", headers=A)).json()
    written = await post(http_client, "gone", {"role": "user", "content": "sealed under the first key"})
    await caught_up(http_client, "gone", written["offset"])
    assert (await http_client.delete(f"{BASE}/gone", headers=A)).status_code == 202
    after = (await http_client.post(f"{BASE}/gone/key", headers=A)).json()
    assert after["key_id"] != before["key_id"]
    assert after["key"] != before["key"]


@pytest.mark.service_settings(sealing=False)
async def test_a_service_that_seals_nothing_has_no_key_to_hand_out(http_client: httpx.AsyncClient) -> None:
    refused = await http_client.post(ROUTE, headers=A)
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "sealing_off"
