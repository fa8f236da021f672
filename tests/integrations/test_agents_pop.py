"""Which served items a pop took (``kept_after_pop``), pure: what is served may also change at
its front between the read before the pop and the read after it."""

from __future__ import annotations

from typing import Any

from convlog.integrations.agents import kept_after_pop


def user(n: int) -> dict[str, Any]:
    return {"role": "user", "content": f"u{n}"}


def text(n: int) -> dict[str, Any]:
    return {"role": "assistant", "content": f"a{n}"}


def reasoning(n: int) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": "blob"}


def summary(covers: int) -> dict[str, Any]:
    return {"role": "system", "content": f"summary through turn {covers}"}


def popped(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    leading = (bool(before) and before[0].get("role") == "system", bool(after) and after[0].get("role") == "system")
    return before[kept_after_pop(before, after, leading=leading) :]


def test_the_popped_message_is_the_tail_that_left() -> None:
    before = [user(1), text(1), user(2), reasoning(2), text(2)]
    assert popped(before, [user(1), text(1), user(2), reasoning(2)]) == [text(2)]  # one of its items
    assert popped(before, [user(1), text(1), user(2)]) == [reasoning(2), text(2)]  # the whole message
    assert popped(before, [user(0), text(0), user(1), text(1), user(2)]) == [reasoning(2), text(2)]  # older came in


def test_a_summary_recorded_meanwhile_does_not_make_the_covered_turns_popped() -> None:
    """The summarizer covered turns 3-5 between the two reads: they left the served items, the
    pop took only its own. Counting them popped re-appended them as a new message: back again."""
    before = [summary(2), user(3), text(3), user(4), text(4), user(6), reasoning(6), text(6)]
    assert popped(before, [summary(5), user(6), reasoning(6)]) == [text(6)]
    assert popped(before, [summary(5), user(6)]) == [reasoning(6), text(6)]
    first = [user(0), text(0), user(1), reasoning(1), text(1)]  # no summary before, one after
    assert popped(first, [summary(0), user(1)]) == [reasoning(1), text(1)]


def test_a_summary_covering_every_other_item_leaves_the_assistants_run_popped() -> None:
    before = [summary(2), user(3), reasoning(3), text(3)]
    assert popped(before, [summary(3)]) == [reasoning(3), text(3)]
    assert popped([summary(2), user(3), text(3)], [summary(3)]) == [text(3)]


def test_unchanged_instructions_keep_the_old_rule() -> None:
    before = [summary(2), reasoning(3), text(3)]  # the user message is cut: the message alone is served
    assert popped(before, [summary(2)]) == [reasoning(3), text(3)]
    assert popped([reasoning(3), text(3)], []) == [reasoning(3), text(3)]


def test_another_writers_message_appended_meanwhile_does_not_make_the_history_popped() -> None:
    """The old rule took every served item as popped when nothing lined up, and appended all but
    the last again: the conversation's history, twice."""
    before = [user(1), text(1), user(2), reasoning(2), text(2)]
    assert popped(before, [user(1), text(1), user(2), user(9)]) == [reasoning(2), text(2)]
    assert popped([user(1), text(1), user(2), text(2)], [user(1), text(1), user(2), user(9)]) == [text(2)]
