"""The version range a compat module declares: the installed distribution is inside it, and it is
the range pyproject.toml's dependencies pin (so an upgrade past it fails the compat test first)."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def pinned(distribution: str) -> SpecifierSet:
    """pyproject.toml's range for ``distribution`` (a runtime dependency)."""
    dependencies = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    wanted = canonicalize_name(distribution)
    [requirement] = [r for d in dependencies if canonicalize_name((r := Requirement(d)).name) == wanted]
    return requirement.specifier


def assert_within(distribution: str, declared: str) -> None:
    """The installed ``distribution`` is in the ``declared`` range, which has an upper bound and
    is pyproject.toml's."""
    assert re.search(r"<\d", declared), f"{distribution}: a private API's range needs an upper bound"
    assert pinned(distribution) == SpecifierSet(declared), f"pyproject.toml pins {distribution} otherwise"
    installed = Version(version(distribution))
    assert installed in SpecifierSet(declared), (
        f"{distribution} {installed} is outside {declared}, the range its compat module was written for: "
        "check the behaviour its test pins, then widen the range there and in pyproject.toml"
    )
