"""The provider-format examples of docs/formats.md work as written: every ``curl … -X POST`` body is
appended with its ``?format=``, and every context ``curl`` answers 200 in its format."""

from __future__ import annotations

import asyncio
import json
import re
import shlex
from pathlib import Path

import httpx

from tests.test_api_in_memory import A, client, deps

__all__ = ["client", "deps"]  # the fixtures

SECTION = Path(__file__).parents[2].joinpath("docs", "formats.md").read_text()


def _commands() -> list[list[str]]:
    out = []
    for block in re.findall(r"```bash\n(.*?)```", SECTION, re.S):
        text = re.sub(r"\n\s*#.*", "", block)  # the comments showing answers
        out.extend(shlex.split(c.replace("\n", " ")) for c in re.split(r"\n(?=curl )", text.strip()))
    return out


async def test_the_format_examples_of_the_docs_run(client: httpx.AsyncClient) -> None:
    commands = _commands()
    assert len(commands) >= 8
    for args in commands:
        url = next(a for a in args if "$BASE" in a).replace("$BASE", "/v1/users/u1/conversations")
        if "-d" in args:
            body = json.loads(args[args.index("-d") + 1])
            r = await client.post(url, json=body, headers=A)
            assert r.status_code == 202, (url, r.text)
        else:
            for _ in range(100):  # the page reads without min_offset: the projection may lag a little
                r = await client.get(url, headers=A)
                if r.status_code != 404:
                    break
                await asyncio.sleep(0.05)
            assert r.status_code == 200, (url, r.text)
            fmt = re.search(r"format=(\w+)", url)
            assert fmt is not None
            assert r.json()["format"] == fmt.group(1)
