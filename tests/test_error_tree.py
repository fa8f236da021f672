"""Every exception class the packages define is in the ConvlogError tree, with its own stable
``code``, and the tree drawn in the docstring of ``events/errors.py`` is exactly that tree: the
classes, their parents, the modules they live in and which are retriable. A new exception
outside the tree, or one the drawing does not show, fails here."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass

import events.errors
from events.errors import ConvlogError

PACKAGES = ("events", "projectors", "query_api", "summarizer", "pgstore", "convlog")
_LINE = re.compile(r"^(?P<indent> *)\* (?P<name>\w+) — (?P<module>[\w.]+)(?P<notes>(, [^,]+)*)$")


@dataclass(frozen=True)
class Drawn:
    parent: str | None
    module: str
    notes: tuple[str, ...]


def defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in PACKAGES:
        root = importlib.import_module(package)
        names = [package, *(m.name for m in pkgutil.walk_packages(root.__path__, f"{package}."))]
        for name in names:
            module = importlib.import_module(name)
            for cls in vars(module).values():
                if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == name:
                    assert cls.__name__ not in found, f"two exceptions named {cls.__name__}"
                    found[cls.__name__] = cls
    return found


def drawn_tree() -> dict[str, Drawn]:
    """The tree in the docstring: ``* Name — module[, note]...``, children indented 2 more."""
    doc = events.errors.__doc__ or ""
    lines = [line.strip("\n")[4:] for line in doc.splitlines() if line.lstrip().startswith("* ")]
    tree: dict[str, Drawn] = {}
    stack: list[str] = []  # the names on the path to the current line
    for line in lines:
        match = _LINE.match(line)
        assert match, f"not a tree line: {line!r}"
        depth, rest = divmod(len(match["indent"]), 2)
        assert rest == 0, f"bad indentation: {line!r}"
        assert depth <= len(stack), f"bad indentation: {line!r}"
        del stack[depth:]
        notes = tuple(n for n in match["notes"].split(", ") if n)
        tree[match["name"]] = Drawn(stack[-1] if stack else None, match["module"], notes)
        stack.append(match["name"])
    return tree


def test_every_exception_the_packages_define_is_a_convlog_error_with_its_own_code() -> None:
    classes = defined_exceptions()
    assert len(classes) > 30  # the walk found the packages' modules
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, ConvlogError))
    assert outside == []
    no_code = sorted(name for name, cls in classes.items() if "code" not in vars(cls))
    assert no_code == []  # a subclass reusing its parent's code cannot be told apart by clients
    codes = [vars(cls)["code"] for cls in classes.values()]
    assert len(set(codes)) == len(codes), sorted(c for c in codes if codes.count(c) > 1)
    assert all(isinstance(vars(cls).get("retriable", cls.retriable), bool) for cls in classes.values())


def test_the_docstring_draws_exactly_the_tree_the_packages_define() -> None:
    classes = defined_exceptions()
    tree = drawn_tree()
    assert sorted(tree) == sorted(classes)
    for name, cls in classes.items():
        drawn = tree[name]
        parent = next((b for b in cls.__mro__[1:] if issubclass(b, ConvlogError)), None)
        assert drawn.parent == (parent.__name__ if parent else None), name
        assert drawn.module == cls.__module__, name
        assert ("retriable" in drawn.notes) == cls.retriable, name
        others = [b.__name__ for b in cls.__bases__ if not issubclass(b, ConvlogError) and b is not Exception]
        also = [n.rsplit(" ", 1)[-1] for n in drawn.notes if n.startswith("also a ")]
        assert also == others, name
