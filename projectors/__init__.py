"""convlog's projections: the projector that folds the log into Postgres read models, the
window policy, token accounting and the projection errors (the Postgres side is :mod:`pgstore`).

The errors and the window policy are imported with the package; the rest (tiktoken behind
them) on first use.
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
    from projectors.runner import Projector, ProjectorStats
    from projectors.tokens import ENCODINGS, ModelSpec, TokenCounter, cached_counter, model_spec
else:
    from events._lazy import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "Projector": "projectors.runner",
            "ProjectorStats": "projectors.runner",
            "ENCODINGS": "projectors.tokens",
            "ModelSpec": "projectors.tokens",
            "TokenCounter": "projectors.tokens",
            "cached_counter": "projectors.tokens",
            "model_spec": "projectors.tokens",
        },
    )

__all__ = [
    "ENCODINGS",
    "InvariantError",
    "MigrationError",
    "ModelSpec",
    "PositionBeyondLogEndError",
    "PositionConflictError",
    "ProjectionError",
    "Projector",
    "ProjectorStats",
    "RecordRefusedError",
    "StoreUnavailableError",
    "TokenCounter",
    "VersionBusyError",
    "Window",
    "WindowPolicy",
    "cached_counter",
    "model_spec",
]
