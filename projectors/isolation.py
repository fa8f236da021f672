"""Finding the record whose rows Postgres refused, in a batch refused as a whole.

A batch is written in one transaction; when Postgres refuses the data of one of its rows (a NUL
in text, a CHECK constraint, a trigger: :class:`~projectors.errors.RecordRefusedError`) the whole
batch fails and the error does not say which record made that row. :func:`first_refused`
bisects the batch's prefixes — each written and rolled back in a savepoint — to the record
whose addition makes the write fail; :func:`as_refused` turns it into poison, which the fold
dead-letters and whose conversation it parks, as for a record that cannot be decoded. Only the
failure path pays for this; a batch that goes through is written once, as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from projectors.errors import RecordRefusedError
from projectors.fold import Decoded, Poison

# Writes the given records in a savepoint, rolls it back, and answers the refusal (None: accepted).
TryPrefix = Callable[[Sequence[Decoded]], Awaitable[RecordRefusedError | None]]


async def first_refused(
    decoded: Sequence[Decoded], try_prefix: TryPrefix, refused: RecordRefusedError
) -> tuple[int, RecordRefusedError]:
    """The index of the record that makes the write fail, and the refusal it gets.

    ``refused`` is the refusal of the whole of ``decoded``. Invariant of the search: the first
    ``lo`` records are accepted (none trivially are), the first ``hi`` refused. It ends with
    ``hi == lo + 1``: the records before ``hi - 1`` are accepted, adding it is refused — about
    log2(n) attempts, each of a prefix (a refusal may depend on earlier records of the batch,
    so a record is always tried after the ones before it, never alone).
    """
    lo, hi = 0, len(decoded)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        answer = await try_prefix(decoded[:mid])
        if answer is None:
            lo = mid
        else:
            hi, refused = mid, answer
    return hi - 1, refused


def as_refused(d: Decoded, refused: RecordRefusedError) -> Decoded:
    """``d`` as poison: its event decodes, but Postgres refuses the rows it makes."""
    error = f"Postgres refused its rows: {refused.reason}"
    return Decoded(d.record, d.key, None, Poison(d.record, d.key, RecordRefusedError.code, error))
