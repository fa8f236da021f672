"""The configuration table of docs/configuration.md matches the one declaration (``convlog/settings/declared.py``)."""

from __future__ import annotations

import re
from pathlib import Path

from convlog.settings import Settings, show, variable

CONFIGURATION_PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def table_rows() -> dict[str, str]:
    """{variable: its default cell} from the table under ``## Configuration``."""
    section = CONFIGURATION_PAGE.read_text(encoding="utf-8")
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in {"variable", "---"}:
            continue
        names = re.findall(r"`([^`]+)`", cells[0])
        assert len(names) == 1, f"one variable per row: {line}"
        assert names[0] not in rows, f"{names[0]} is in the table twice"
        rows[names[0]] = cells[1]
    return rows


def documented_default(value: object) -> str:
    """How the table starts a setting's default: ``unset`` (maybe followed by what that means),
    else the value in backticks."""
    shown = show(value)
    return "unset" if shown == "unset" else f"`{shown}`"


def test_every_declared_setting_is_in_the_readme_with_its_default() -> None:
    rows = table_rows()
    declared = {variable(name): documented_default(field.default) for name, field in Settings.model_fields.items()}
    missing = sorted(set(declared) - set(rows))
    assert missing == [], f"declared but not in docs/configuration.md's table: {missing}"
    wrong = {var: (rows[var], default) for var, default in declared.items() if not rows[var].startswith(default)}
    assert wrong == {}, "the page's default cell vs the declared default"


def test_the_readme_lists_no_undeclared_setting() -> None:
    declared = {variable(name) for name in Settings.model_fields}
    assert sorted(set(table_rows()) - declared) == []
