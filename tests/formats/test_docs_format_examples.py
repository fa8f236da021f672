"""The provider-format examples of docs/formats.md work as written: every ``curl … -X POST`` body is
appended with its ``?format=``, and every context ``curl`` (with the last append's offset as
``min_offset``) answers 200 in its format, the example's tool call in it."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import httpx

from tests.test_api_in_memory import A, deps, in_memory_client

__all__ = ["deps", "in_memory_client"]  # the fixtures

SECTION = Path(__file__).parents[2].joinpath("docs", "formats.md").read_text()
SERVED_CALL = {"anthropic": '"tool_use"', "responses": '"function_call"', "gemini": '"functionCall"'}


def _commands() -> list[list[str]]:
    out = []
    for block in re.findall(r"```bash\n(.*?)```", SECTION, re.S):
        text = re.sub(r"\n\s*#.*", "", block)  # the comments showing answers
        out.extend(shlex.split(c.replace("\n", " ")) for c in re.split(r"\n(?=curl )", text.strip()))
    return out


async def test_the_format_examples_of_the_docs_run(in_memory_client: httpx.AsyncClient) -> None:
    commands = _commands()
    assert len(commands) >= 9
    offset = None
    for args in commands:
        url = next(a for a in args if "$BASE" in a).replace("$BASE", "/v1/users/u1/conversations")
        if "-d" in args:
            body = json.loads(args[args.index("-d") + 1])
            r = await in_memory_client.post(url, json=body, headers=A)
            assert r.status_code == 202, (url, r.text)
            offset = r.json()["offset"]  # $OFFSET: the last append's
        else:
            assert "min_offset=$OFFSET" in url  # the page reads its own writes, never a 404 for lag
            r = await in_memory_client.get(url.replace("$OFFSET", str(offset)), headers=A)
            assert r.status_code == 200, (url, r.text)
            fmt = re.search(r"format=(\w+)", url)
            assert fmt is not None
            assert r.json()["format"] == fmt.group(1)
            assert SERVED_CALL[fmt.group(1)] in r.text  # each example's tool call, served with its result
