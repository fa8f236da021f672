"""No import cycle among our packages: module-level and function-level imports alike (grimp, which
import-linter builds its graph with, reads every import statement of a module, also those inside
functions and under ``TYPE_CHECKING``), so a cycle cannot be dodged by importing late."""

from __future__ import annotations

from collections.abc import Iterator

import grimp

PACKAGES = ("events", "projectors", "query_api", "summarizer", "pgstore", "convlog", "devservices")


def import_cycles(graph: grimp.ImportGraph) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively), and
    any module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[frozenset[str]] = []

    def visit(root: str) -> None:
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph.find_modules_directly_imported_by(other)))))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == module:
                            break
                    if len(component) > 1 or module in graph.find_modules_directly_imported_by(module):
                        cycles.append(frozenset(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def test_no_import_cycle_among_the_packages() -> None:
    cycles = [sorted(c) for c in import_cycles(_graph())]
    assert cycles == [], f"import cycles (each a set of modules importing one another): {cycles}"


def test_the_check_sees_a_cycle_through_a_function_level_import() -> None:
    """The control: grimp reports an import inside a function, as the check needs."""
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.a")
    assert import_cycles(graph) == [frozenset({"pkg.a", "pkg.b"})]
    assert grimp.build_graph("convlog", cache_dir=None).direct_import_exists(
        importer="convlog.runtime.serve", imported="convlog.jobs.retention"
    )  # serve imports retention inside a function only
