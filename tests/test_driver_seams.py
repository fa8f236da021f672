"""The drivers stay at their seams, computed from the source (not a hand list of modules):
only the Postgres package (``pgstore/``) imports psycopg or psycopg_pool, and only the Kafka
adapters import aiokafka. No allow-list: every module that speaks SQL is in ``pgstore/``."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp

from tests.test_code_map import PACKAGES, REPO

POSTGRES_DRIVER = frozenset({"psycopg", "psycopg_pool"})
KAFKA_DRIVER = frozenset({"aiokafka"})


def imported_packages(path: Path) -> set[str]:
    """The top-level packages ``path`` imports anywhere (module level, in functions, under
    ``TYPE_CHECKING``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def importers(drivers: frozenset[str]) -> set[str]:
    """The modules of the packages (paths relative to the repository) that import ``drivers``."""
    return {
        path.relative_to(REPO).as_posix()
        for package in PACKAGES
        for path in (REPO / package).rglob("*.py")
        if imported_packages(path) & drivers
    }


def is_kafka_adapter(module: str) -> bool:
    """The naming rule: a Kafka adapter is a ``kafka*`` module of ``events/``, ``events/sealing/``
    or ``projectors/`` (the log, its consumer groups, the keys topic, the projector's record source)."""
    folder, _, name = module.rpartition("/")
    return folder in {"events", "events/sealing", "projectors"} and name.startswith("kafka")


def test_the_packages_are_scanned() -> None:
    assert "pgstore" in PACKAGES
    assert "pgstore/positions.py" in importers(POSTGRES_DRIVER)  # the scan sees what it must


def test_only_pgstore_imports_the_postgres_driver() -> None:
    outside = {m for m in importers(POSTGRES_DRIVER) if not m.startswith("pgstore/")}
    assert outside == set(), "Postgres code outside pgstore/: move it into pgstore/"


def test_only_the_kafka_adapters_import_aiokafka() -> None:
    found = importers(KAFKA_DRIVER)
    assert found, "no module imports aiokafka: the scan is broken"
    assert {m for m in found if not is_kafka_adapter(m)} == set()
    assert "events/kafka_log.py" in found  # the rule names real adapters


# The drivers the core must not reach but through an adapter (the provider SDKs validate served
# contexts in tests only).
CORE_DRIVERS = (
    "aiokafka",
    "psycopg",
    "psycopg_pool",
    "fastapi",
    "starlette",
    "uvicorn",
    "openai",
    "httpx",
    "anthropic",
    "google",
)


def is_core_adapter(module: str) -> bool:
    """The naming rule for the core's adapters to a driver: the Kafka adapters, the summarizer's
    ``*_model`` adapters, the HTTP API (``query_api.http``), and the packages' ``__init__``,
    whose lazy exports name them (imported on first use only)."""
    name = module.rsplit(".", 1)[-1]
    return (
        module in {"events", "projectors", "query_api", "summarizer"}
        or name.startswith("kafka")
        or (module.startswith("summarizer.") and name.endswith("_model"))
        or module == "query_api.http"
        or module.startswith("query_api.http.")
    )


def test_the_core_reaches_no_driver_but_through_its_adapters() -> None:
    """Computed, not listed: every module of the core packages that is not an adapter by the
    naming rule imports no driver, directly or through any chain of imports (the window, the fold,
    context assembly, the formats, the ports, the in-memory adapters, the live-read layer...)."""
    graph = grimp.build_graph("events", "projectors", "query_api", "summarizer", include_external_packages=True)
    core = [m for m in graph.modules if m.split(".")[0] in {"events", "projectors", "query_api", "summarizer"}]
    reaching = {
        m: sorted({u.split(".")[0] for u in graph.find_upstream_modules(m)} & set(CORE_DRIVERS))
        for m in core
        if not is_core_adapter(m)
    }
    assert len(reaching) > 100  # the scan sees the core
    assert {m: d for m, d in reaching.items() if d} == {}
    assert graph.find_upstream_modules("events.kafka_log") & {"aiokafka"}  # the rule's control: adapters do reach
