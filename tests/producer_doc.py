"""Reading the tables of docs/producers.md (and the versions table of schemas/README.md), so
tests can hold the written producer contract to the code."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "producers.md"
SCHEMA_README = REPO / "schemas" / "README.md"
SCHEMAS = {
    int(m.group(1)): p for p in sorted(REPO.glob("schemas/event.v*.avsc")) if (m := re.search(r"v(\d+)", p.name))
}


def cell(text: str) -> str:
    """A table cell's text without its surrounding code marks."""
    text = text.strip()
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == "`" else text


def table(heading: str, *, path: Path = DOC) -> list[list[str]]:
    """The rows (header and separator left out) of the first table after the heading named."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if re.fullmatch(rf"#+ {re.escape(heading)}", line))
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    return rows[2:]


@dataclass(frozen=True)
class FingerprintRow:
    version: int
    wire: str
    java: str


def fingerprint_rows() -> list[FingerprintRow]:
    return [FingerprintRow(int(r[0]), cell(r[2]), cell(r[3])) for r in table("Fingerprint notation")]


def readme_fingerprint_rows() -> list[FingerprintRow]:
    return [FingerprintRow(int(r[0]), cell(r[1]), cell(r[2])) for r in table("Versions", path=SCHEMA_README)]


def topic_settings() -> dict[str, str]:
    """The settings the doc says a topic convlog creates gets (``min(2, replicas)`` left as text)."""
    return {cell(r[0]): cell(r[1]) for r in table("The topic")}
