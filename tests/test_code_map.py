"""The code map (docs/architecture.md, "Code map") tells the truth: every module of the packages
is named in the bullet of its directory, and every module a bullet names exists."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("events", "projectors", "query_api", "summarizer", "pgstore", "convlog", "devservices")
SPAN = re.compile(r"`([^`\s]+)`")


def bullets() -> dict[str, str]:
    """{directory: its bullet's text}, for the bullets that start with a directory (``- `events/` — …``)."""
    section = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8").split("\n## Code map\n", 1)[1]
    out: dict[str, str] = {}
    current: str | None = None
    for line in section.splitlines():
        started = re.match(r"- `([a-z_/]+/)`", line)
        if started:
            current = started.group(1)
            out[current] = line
        elif current is not None and line.startswith("  "):
            out[current] += "\n" + line
        else:
            current = None
    return out


def _owner(module: str, map_: dict[str, str]) -> str | None:
    owners = [d for d in map_ if module.startswith(d)]
    return max(owners, key=len) if owners else None


def _named(relative: str, text: str) -> bool:
    """``relative`` (to its bullet's directory) is named: as itself, by a pattern (``routes_*.py``),
    or by its file name beside its sub-directory's name (``formats/`` … ``registry.py``)."""
    spans = SPAN.findall(text)
    name = relative.rsplit("/", 1)[-1]
    if relative in spans or any("*" in s and fnmatch.fnmatch(relative, s) for s in spans):
        return True
    folder = relative.rsplit("/", 1)[0] + "/" if "/" in relative else None
    return folder is not None and folder in spans and (name in spans or f"{folder}{name}" in spans)


def test_every_module_is_in_the_code_map() -> None:
    map_ = bullets()
    missing = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            module = path.relative_to(REPO).as_posix()
            if path.name == "__init__.py" or "/_services/" in module:
                continue
            owner = _owner(module, map_)
            if owner is None or not _named(module[len(owner) :], map_[owner]):
                missing.append(module)
    assert missing == [], f"modules the code map does not name: {missing}"


def test_every_module_the_code_map_names_exists() -> None:
    stale = []
    for folder, text in bullets().items():
        for span in SPAN.findall(text):
            if span.endswith(".py") and "*" not in span:
                candidates = [REPO / folder / span, *(REPO / folder).rglob(span.rsplit("/", 1)[-1])]
                if not any(c.is_file() for c in candidates):
                    stale.append(f"{folder}{span}")
    assert stale == [], f"the code map names modules that do not exist: {stale}"
