"""The framework examples of docs/adapters.md, read from the page itself so that what users copy
is what the tests run."""

from __future__ import annotations

import re
from pathlib import Path

ADAPTERS_PAGE = Path(__file__).parents[2] / "docs" / "adapters.md"


def readme_example(heading: str) -> str:
    """The first ```python block written out under ``## <heading>`` (the example with a real model;
    the offline one before it is a script of examples/python, included by a snippet line and
    run by tests/test_examples.py)."""
    text = ADAPTERS_PAGE.read_text().split(f"\n## {heading}\n", 1)[1]
    found = re.search(r"```python\n(?!--8<--)(.*?)```", text, re.S)
    assert found is not None, heading
    return found.group(1)
