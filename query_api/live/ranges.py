"""The range reading of a live context: turns no summary covers yet stay in the context's range,
which can be long, so its newest rows are read first and more only when the budget reaches back
further — the answer is the one the whole range gives."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from events.keys import ConversationKey
from projectors.tokens import cached_counter
from query_api.context import NeedOlderMessagesError, assemble
from query_api.context_types import Context, ContextRequest, ModelSpec, StoredMessage
from query_api.live.errors import ConversationNotFoundError
from query_api.ports import ContextInputs, ReadModels

NEWEST_FIRST = 128  # rows read first; most budgets end inside them
MAX_NEWEST = 4096  # beyond that, read the whole range


class RowsNeeded:
    """How many newest rows the next context of a conversation, encoding and budget should read
    first, judged by what the rows of the last one cost, for the ``size`` long-range
    conversations served last: a long range (turns no summary covers yet) takes one read
    instead of two, turn after turn. Only a first guess: too few rows still read again, and a
    range shorter than the guess is read whole — the answer is the whole range's either way."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._rows: OrderedDict[tuple[str, str, int], int | None] = OrderedDict()

    def first(self, key: tuple[str, str, int]) -> int | None:
        return self._rows.get(key, NEWEST_FIRST)

    def read_with(self, key: tuple[str, str, int], newest: int | None) -> None:
        """Start the next such context with ``newest`` rows (None: the whole range)."""
        if newest is not None and newest <= NEWEST_FIRST:
            self._rows.pop(key, None)  # the default does: keep the memory for long ranges
            return
        self._rows[key] = newest
        self._rows.move_to_end(key)
        if len(self._rows) > self._size:
            self._rows.popitem(last=False)


async def assemble_live(
    reads: ReadModels,
    key: ConversationKey,
    spec: ModelSpec,
    request: ContextRequest,
    rows_needed: RowsNeeded | None = None,
) -> tuple[Context, ContextInputs]:
    """The context of ``key`` from these read models, and the inputs it came from: the range's
    newest rows read first (as many as the conversation's last such context was read with, by
    ``rows_needed``), more only when the budget reaches back further (as many as the budget
    needs by the first rows' costs, then everything). :class:`ConversationNotFoundError` for a
    conversation the read models do not hold."""
    count = cached_counter(spec.encoding)
    available = request.message_budget
    hint = (str(key), spec.encoding, available)
    newest = NEWEST_FIRST if rows_needed is None else rows_needed.first(hint)
    if request.editing.active:
        newest = None  # the edits are a fold over the whole range (query_api/context_editing.py)
    while True:
        inputs = await reads.context_inputs(key, encoding=spec.encoding, newest=newest)
        if inputs is None:
            raise ConversationNotFoundError("no such conversation")
        try:
            ctx = assemble(
                system=inputs.system,
                summary=inputs.summary,
                messages=inputs.messages,
                request=request,
                spec=spec,
                count=count,
                complete=inputs.complete,
                usable_turns=inputs.usable_turns,
            )
        except NeedOlderMessagesError:
            # Read enough rows next time for the budget, judging by what these cost.
            wanted = _rows_for(inputs.messages, available, spec)
            newest = None if newest is None or wanted > MAX_NEWEST else max(wanted, 2 * len(inputs.messages))
            continue
        if rows_needed is not None:  # by what these rows cost: fewer next time if they grew
            wanted = _rows_for(inputs.messages, available, spec)
            rows_needed.read_with(hint, None if wanted > MAX_NEWEST else wanted)
        return ctx, inputs


def _rows_for(read: Sequence[StoredMessage], available: int, spec: ModelSpec) -> int:
    """How many rows the budget reaches back to, with half again for a margin, judging by what
    the rows ``read`` cost."""
    spent = sum(m.tokens + spec.tokens_per_message + 1 for m in read) or 1
    return int(len(read) * available / spent * 1.5) + 1
