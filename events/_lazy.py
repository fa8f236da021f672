"""Lazy re-exports for the packages' ``__init__`` (a PEP 562 module ``__getattr__``).

A package's public names are exported from its ``__init__``, but several live in modules that
import a driver (aiokafka, the Postgres driver, fastapi, openai) or fastavro/tiktoken: importing those on
``import events`` would cost tens to hundreds of milliseconds for callers that only want the
event types. Such names are imported on first access instead, then cached in the package.

Type checkers see the same names through ``if TYPE_CHECKING:`` imports in each ``__init__``;
the hook is defined only at run time, so a misspelt name is still a type error (a module
``__getattr__`` visible to mypy would type every unknown attribute as ``Any``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, sources: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``sources`` maps an exported name to the module
    that defines it."""

    def __getattr__(name: str) -> Any:  # noqa: N807 - the PEP 562 hook's name
        module = sources.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later accesses skip the hook
        return value

    def __dir__() -> list[str]:  # noqa: N807 - the PEP 562 hook's name
        return sorted({*vars(sys.modules[package]), *sources})

    return __getattr__, __dir__
