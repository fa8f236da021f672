"""The drivers stay at their seams, computed from the source (not a hand list of modules):
only the Postgres package (``pgstore/``) imports psycopg or psycopg_pool, and only the Kafka
adapters import aiokafka.

The Postgres modules that predate ``pgstore/`` are an explicit allow-list below, moved into
pgstore by the next step: the list only shrinks (a module on it that no longer imports the
driver fails the test too, so that it is struck off), and it ends empty."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_code_map import PACKAGES, REPO

POSTGRES_DRIVER = frozenset({"psycopg", "psycopg_pool"})
KAFKA_DRIVER = frozenset({"aiokafka"})

# Moved into pgstore by the next step. Nothing is added here: new Postgres code goes into pgstore/.
NOT_YET_IN_PGSTORE = frozenset(
    {
        "projectors/batch_inputs.py",
        "projectors/batch_statement.py",
        "projectors/event_index.py",
        "projectors/migrate.py",
        "projectors/pg.py",
        "projectors/pool_check.py",
        "projectors/read_sql.py",
        "projectors/session_limits.py",
        "projectors/store.py",
        "projectors/versions.py",
        "projectors/writes.py",
        "query_api/positions_listener.py",
        "query_api/reads.py",
        "summarizer/store.py",
        "convlog/embedded/postgres_server.py",
    }
)


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
    """The naming rule: a Kafka adapter is a ``kafka*`` module of ``events/`` or ``projectors/``
    (the log, its consumer groups, the projector's record source)."""
    folder, _, name = module.rpartition("/")
    return folder in {"events", "projectors"} and name.startswith("kafka")


def test_the_packages_are_scanned() -> None:
    assert "pgstore" in PACKAGES
    assert "pgstore/positions.py" in importers(POSTGRES_DRIVER)  # the scan sees what it must


def test_only_pgstore_imports_the_postgres_driver() -> None:
    outside = {m for m in importers(POSTGRES_DRIVER) if not m.startswith("pgstore/")}
    assert outside - NOT_YET_IN_PGSTORE == set(), "Postgres code outside pgstore/: move it into pgstore/"


def test_the_allow_list_only_shrinks() -> None:
    stale = NOT_YET_IN_PGSTORE - importers(POSTGRES_DRIVER)
    assert stale == set(), f"no longer imports psycopg (moved or freed): strike it off NOT_YET_IN_PGSTORE: {stale}"


def test_only_the_kafka_adapters_import_aiokafka() -> None:
    found = importers(KAFKA_DRIVER)
    assert found, "no module imports aiokafka: the scan is broken"
    assert {m for m in found if not is_kafka_adapter(m)} == set()
    assert "events/kafka_log.py" in found  # the rule names real adapters
