"""An operator's rebuild, blue/green, beside a running ``convlog serve``: build a new version of
the read models from the log, compare it with the live one, switch to it, then check the live
read models against a fresh replay of the log — while the API goes on answering, and serves
the same context afterwards (docs/operating.md, "Rebuilding a projection").

The operator's commands read the service's own settings: run this with the environment of the
``convlog serve`` it works on (its ``CONVLOG_DATABASE_URL``, ``CONVLOG_DATA_DIR`` — the embedded
log is read read-only beside it — or ``CONVLOG_KAFKA_BOOTSTRAP``), plus ``CONVLOG_URL`` and
``CONVLOG_TOKEN`` for the API:

    CONVLOG_URL=http://127.0.0.1:8080 CONVLOG_TOKEN=... python examples/python/operator_rebuild.py
"""

from __future__ import annotations

import subprocess
import sys
import uuid

from convlog.client import ConvlogClient

USER = "u1"
MODEL = "gpt-4o"
CONVLOG = [sys.executable, "-m", "convlog.cli.main"]  # the `convlog` command of this Python


def convlog(*args: str) -> None:
    """Run one operator command, as a shell would; a failure stops the example (its exit code:
    docs/operating.md, "How the commands behave")."""
    print(f"$ convlog {' '.join(args)}", flush=True)
    subprocess.run([*CONVLOG, *args], check=True)  # noqa: S603 -- our own CLI, fixed arguments


def main() -> None:
    conversation = f"rebuild-{uuid.uuid4().hex[:8]}"
    with ConvlogClient() as client:  # CONVLOG_URL and CONVLOG_TOKEN; closed at the end of the block
        print(f"convlog at {client.base_url}: conversation {conversation}")
        client.append(USER, conversation, {"role": "user", "content": "Remember: the code word is heron."})
        sent = client.append(USER, conversation, {"role": "assistant", "content": "Noted: heron."})
        before = client.context(USER, conversation, model=MODEL, budget_tokens=4000, min_offset=sent.offset)

        convlog("rebuild", "read_models", "--new", "--verify", "--switch")  # a new version, compared, made live
        convlog("verify")  # the live read models == a fresh replay of the log (a sample of conversations)

        sent = client.append(USER, conversation, {"role": "user", "content": "What is the code word?"})
        after = client.context(USER, conversation, model=MODEL, budget_tokens=4000, min_offset=sent.offset)
        kept = after.messages[: len(before.messages)] == before.messages
        print(f"after the switch: {len(after.messages)} messages, the {len(before.messages)} from before", end=" ")
        print("kept" if kept else "CHANGED")
        if not kept:
            sys.exit(1)


if __name__ == "__main__":
    main()
