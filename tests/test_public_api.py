"""The packages' public API: what each ``__init__`` exports (``__all__``), that it is the object
its module defines, that ``import events`` (and the others) loads no driver, and that the
example of docs/appending.md imports it from there."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("events", "projectors", "query_api", "summarizer", "convlog")
DRIVERS = ("aiokafka", "psycopg", "psycopg_pool", "fastapi", "starlette", "uvicorn", "openai", "fastavro", "tiktoken")


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_is_the_object_its_module_defines(name: str) -> None:
    package = importlib.import_module(name)
    exported = package.__all__
    assert exported, name
    assert len(set(exported)) == len(exported)
    assert set(exported) <= set(dir(package))
    submodules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    for attr in exported:
        # `pgstore.migrate` names a module: exporting its function under that name would
        # make `pgstore.migrate` mean either, depending on what was imported first.
        assert attr not in submodules, f"{name}.{attr} is also a submodule"
        value = getattr(package, attr)
        if isinstance(value, type) or inspect.isfunction(value):  # not the aliases, constants
            assert value.__module__.startswith(f"{name}."), (attr, value.__module__)
            assert getattr(importlib.import_module(value.__module__), value.__name__) is value
    with pytest.raises(AttributeError, match="no attribute 'NotExported'"):
        _ = package.NotExported


def test_importing_the_packages_loads_no_driver() -> None:
    """``import events`` for the event types must not pay for aiokafka, fastavro, psycopg, ...
    (those load when a name that needs them is first used)."""
    program = (
        "import json, sys\n"
        f"import {', '.join(PACKAGES)}\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(DRIVERS)!r})))\n"
        "from events import ConversationProducer, KafkaEventLog\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(DRIVERS)!r})))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    before, after = (json.loads(line) for line in result.stdout.splitlines())
    assert before == []
    assert {"aiokafka", "fastavro"} <= set(after)  # the control: first use does import them


def test_the_readme_example_imports_from_the_packages() -> None:
    """The imports of docs/appending.md are the public API, and they work."""
    section = (REPO / "docs" / "appending.md").read_text(encoding="utf-8")
    block = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert block
    imports = [line for line in block[1].splitlines() if line.startswith(("from ", "import "))]
    assert imports
    for line in imports:
        module = line.split()[1]
        assert module in PACKAGES, line  # from the package, not from one of its modules
        exec(line, {})  # noqa: S102 - the docs' own import line
