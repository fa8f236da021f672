"""The one table every bench ends with: ``| figure | value | target | met |`` in Markdown, so the
docs/performance.md is a bench run's output pasted as it is."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    figure: str
    value: str
    target: str = ""
    met: bool | None = None  # None: a figure without a target


def print_table(title: str, rows: list[Row]) -> None:
    print(f"\n**{title}**\n")
    print("| figure | value | target | met |")
    print("|---|---|---|---|")
    for row in rows:
        met = "" if row.met is None else ("yes" if row.met else "**no**")
        print(f"| {row.figure} | {row.value} | {row.target} | {met} |")
