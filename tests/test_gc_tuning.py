"""The collector tuned for projecting processes still collects cycles, and is as before after."""

from __future__ import annotations

import gc
import weakref

from projectors.gc_tuning import PROJECTION_GC_THRESHOLDS, projection_gc


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


def test_cycles_are_still_collected_in_larger_steps_and_the_thresholds_come_back() -> None:
    before = gc.get_threshold()
    with projection_gc():
        assert gc.get_threshold() == PROJECTION_GC_THRESHOLDS
        node = _Node()
        freed = weakref.ref(node)
        del node
        garbage = [[] for _ in range(3 * PROJECTION_GC_THRESHOLDS[0])]  # allocations past a young collection
        assert freed() is None
        del garbage
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
