"""convlog's projections: the projector that folds the log into Postgres read models, the
window policy, token accounting, read-model versions (blue/green) and the projection errors.

The errors and the window policy are imported with the package; the rest (psycopg, tiktoken
behind them) on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from projectors.errors import (
    InvariantError,
    MigrationError,
    PositionBeyondLogEndError,
    PositionConflictError,
    ProjectionError,
    RecordRefusedError,
    StoreUnavailableError,
    VersionBusyError,
)
from projectors.window import Window, WindowPolicy

if TYPE_CHECKING:
    from projectors.pg import PgPool, open_pool
    from projectors.runner import Projector, ProjectorStats
    from projectors.tokens import ENCODINGS, ModelSpec, TokenCounter, cached_counter, model_spec
    from projectors.versions import ProjectionVersion, create_version
else:
    from events._lazy import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "PgPool": "projectors.pg",
            "open_pool": "projectors.pg",
            "Projector": "projectors.runner",
            "ProjectorStats": "projectors.runner",
            "ENCODINGS": "projectors.tokens",
            "ModelSpec": "projectors.tokens",
            "TokenCounter": "projectors.tokens",
            "cached_counter": "projectors.tokens",
            "model_spec": "projectors.tokens",
            "ProjectionVersion": "projectors.versions",
            "create_version": "projectors.versions",
        },
    )

__all__ = [
    "ENCODINGS",
    "InvariantError",
    "MigrationError",
    "ModelSpec",
    "PgPool",
    "PositionBeyondLogEndError",
    "PositionConflictError",
    "ProjectionError",
    "ProjectionVersion",
    "Projector",
    "ProjectorStats",
    "RecordRefusedError",
    "StoreUnavailableError",
    "TokenCounter",
    "VersionBusyError",
    "Window",
    "WindowPolicy",
    "cached_counter",
    "create_version",
    "model_spec",
    "open_pool",
]
