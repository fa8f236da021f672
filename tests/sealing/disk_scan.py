"""Raw-byte scans of what an attacker who copies the disks would get (docs/erasure.md, Threat
model): the Kafka broker's log segment directories of a topic, the Postgres data directory
(WAL included, after a CHECKPOINT), a data directory of the embedded log and keys file, an
archive file. A needle is searched in every form it could take there — its UTF-8, its hex
(both cases) and its base64 at each of the three alignments (the characters that depend on
the needle only) — so content stored encoded rather than in clear is found too.

Markers share a random prefix per writer (``Markers``), so a scan searches six forms of one
prefix per writer, whatever the number of fields that carry a marker."""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from pgstore.pool import PgPool


def forms(needle: bytes | str) -> list[bytes]:
    """``needle`` as plain bytes, hex (lower and upper case) and base64 at each of the three
    alignments: the part of ``base64(x + needle + y)`` that depends on ``needle`` alone."""
    raw = needle.encode() if isinstance(needle, str) else needle
    found = [raw, raw.hex().encode(), raw.hex().upper().encode()]
    for pad in range(3):
        encoded = base64.b64encode(b"\x00" * pad + raw)
        found.append(encoded[4 if pad else 0 : -4])  # leading chars mix in the pad, trailing ones what follows
    return [f for f in found if len(f) >= 8]


@dataclass(frozen=True)
class Hit:
    path: str
    needle: str
    form: bytes

    def __str__(self) -> str:
        return f"{self.path}: {self.needle} as {self.form!r}"


@dataclass
class Markers:
    """Markers of one writer: ``prefix + tag`` per content field, the prefix random and unique."""

    name: str
    prefix: str = field(default_factory=lambda: f"zq{uuid.uuid4().hex[:14]}")

    def __call__(self, tag: str) -> str:
        return f"{self.prefix}{tag}"

    def needles(self) -> dict[str, list[bytes]]:
        return {self.name: forms(self.prefix)}


def files(roots: Iterable[Path]) -> Iterator[Path]:
    for root in roots:
        if root.is_file():
            yield root
            continue
        for directory, _, names in os.walk(root):
            for name in names:
                yield Path(directory) / name


def scan(roots: Iterable[Path], needles: dict[str, list[bytes]]) -> list[Hit]:
    """Every (file, needle, form) found under ``roots``: files that vanish while read (a WAL
    segment recycled, a Kafka segment deleted) and sockets are skipped."""
    hits: list[Hit] = []
    for path in files(roots):
        try:
            data = path.read_bytes()
        except (FileNotFoundError, PermissionError, IsADirectoryError, OSError):
            continue
        hits += [Hit(str(path), name, f) for name, fs in needles.items() for f in fs if f in data]
    return hits


def needles_of(*markers: Markers) -> dict[str, list[bytes]]:
    return {name: fs for m in markers for name, fs in m.needles().items()}


def found(hits: Sequence[Hit], name: str) -> list[Hit]:
    return [h for h in hits if h.needle == name]


async def postgres_data_directory(pool: PgPool) -> Path:
    """The server's data directory (``pg_wal`` in it), after a CHECKPOINT so that the pages are
    on disk; skips when this process cannot read it (a server on another machine)."""
    async with pool.connection() as conn:
        await conn.execute("CHECKPOINT")
        row = await (await conn.execute("SHOW data_directory")).fetchone()
    assert row is not None
    root = Path(row[0])
    if not os.access(root / "pg_wal", os.R_OK | os.X_OK):
        pytest.skip(f"the Postgres data directory {root} is not readable here")
    return root


async def kafka_log_dirs(bootstrap: str) -> list[Path]:
    """Every broker's ``log.dirs`` (DescribeConfigs of each broker); skips when one is not
    readable here (a broker on another machine)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        brokers = (await admin.describe_cluster())["brokers"]
        resources = [ConfigResource(ConfigResourceType.BROKER, str(b["node_id"])) for b in brokers]
        dirs: list[Path] = []
        for response in await admin.describe_configs(resources):
            for resource in response.to_object()["resources"]:
                entries = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
                value = entries.get("log.dirs") or entries.get("log.dir") or ""
                dirs += [Path(d) for d in value.split(",") if d]
    finally:
        await admin.close()
    for d in dirs:
        if not os.access(d, os.R_OK | os.X_OK):
            pytest.skip(f"the broker's log directory {d} is not readable here")
    return dirs


def topic_dirs(log_dirs: Iterable[Path], topic: str) -> list[Path]:
    """The partition directories of ``topic`` (``<topic>-<n>``), and of the topics named after it
    (``<topic>.keys-0``), in every log dir; a deleted one (``…-delete``) too."""
    return sorted(
        d for root in log_dirs for d in root.iterdir() if d.is_dir() and d.name.startswith(f"{topic}") and "-" in d.name
    )
