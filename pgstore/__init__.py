"""convlog's Postgres package: the only package that speaks SQL and imports psycopg.

Every statement convlog sends to Postgres is stated once here, as a typed async function over
a pool (keyword-only options, frozen dataclasses or tuples as results), and the jobs above it
(:mod:`convlog.ops`, and after them the projector, the query API and the summarizer) call
those functions: they hold no SQL text and import no driver. It sits between the composition
root and the query side (``convlog`` → ``pgstore`` → ``query_api`` | ``summarizer`` →
``projectors`` → ``events``), so it may use the projections' types and the version registry.

The Postgres modules still in :mod:`projectors`, :mod:`query_api` and :mod:`summarizer`
move in here next; ``tests/test_driver_seams.py`` lists them, and the list only shrinks.
"""

from __future__ import annotations

__all__: list[str] = []  # nothing re-exported: callers import the module of the concern (pgstore.positions, ...)
