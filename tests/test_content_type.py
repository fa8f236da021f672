"""Bodies as a newcomer sends them: a JSON body is read as JSON when its Content-Type says nothing
or what curl's ``-d`` sends; another type is 415 naming the header to send; a whole
ChatCompletion sent as a message is refused saying which part to send."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.test_api_in_memory import BASE, A, deps, in_memory_client

__all__ = ["deps", "in_memory_client"]  # the fixtures

BODY = json.dumps({"role": "user", "content": "hello"}).encode()


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "application/x-www-form-urlencoded",
        "application/json",
        "application/json; charset=utf-8",
        "application/merge-patch+json",
    ],
)
async def test_a_json_body_is_appended_whatever_curl_sent_as_its_type(
    in_memory_client: httpx.AsyncClient, content_type: str | None
) -> None:
    headers = dict(A) | ({"Content-Type": content_type} if content_type else {})
    response = await in_memory_client.post(f"{BASE}/ct/messages", content=BODY, headers=headers)
    assert response.status_code == 202, response.text
    params = {"model": "gpt-4o", "budget_tokens": 1000, "min_offset": response.json()["offset"]}
    context = await in_memory_client.get(f"{BASE}/ct/context", params=params, headers=A)
    assert context.json()["messages"][-1] == {"role": "user", "content": "hello"}


@pytest.mark.parametrize("content_type", ["text/plain", "multipart/form-data; boundary=x", "application/xml"])
async def test_a_body_of_another_type_is_415_saying_what_to_send(
    in_memory_client: httpx.AsyncClient, content_type: str
) -> None:
    response = await in_memory_client.post(
        f"{BASE}/ct/messages", content=BODY, headers=A | {"Content-Type": content_type}
    )
    assert response.status_code == 415, response.text
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("unsupported_media_type", "Content-Type")
    assert "Content-Type: application/json" in error["message"]


async def test_a_bodyless_request_is_not_refused_for_its_type(in_memory_client: httpx.AsyncClient) -> None:
    appended = await in_memory_client.post(f"{BASE}/ct/messages", content=BODY, headers=A)
    message_id = appended.json()["message_id"]
    redact = await in_memory_client.post(
        f"{BASE}/ct/messages/{message_id}/redact", headers=A | {"Content-Type": "text/plain"}
    )
    assert redact.status_code == 202, redact.text


async def test_a_whole_chat_completion_sent_as_a_message_is_refused_saying_so(
    in_memory_client: httpx.AsyncClient,
) -> None:
    choice = {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    completion = {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o", "choices": [choice]}
    response = await in_memory_client.post(f"{BASE}/ct/messages", json=completion, headers=A)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_event", "choices")
    assert "whole ChatCompletion" in error["message"]
    assert "choices[0].message" in error["message"]
