"""The summary's share of the cacheable prefix: a summary that extends the previous one (new
lines appended, as the offline summarizer writes until its limit) renders the same leading
text, and a token-prefix cache serves that text again; a rewritten one does not."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from projectors.tokens import count_messages, get_encoding, model_spec
from query_api.cache_prefix import common_prefix_tokens
from query_api.context import assemble
from query_api.context_types import Context, ContextRequest, StoredSummary
from tests.test_context import Builder, count

SPEC = model_spec("gpt-4o")
line = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\n"), max_size=40)
lines = st.lists(line, min_size=1, max_size=8)


def served(summary_lines: list[str], *, summary_id: str, fmt: str = "chat_completions") -> Context:
    b = Builder()
    system = [b.add("system", "you answer questions about the OA system")]
    b.add("user", "the question now")
    summary = StoredSummary(summary_id, "\n".join(summary_lines), covers_through_seq=-1, tokens=0)
    return assemble(
        system=system,
        summary=summary,
        messages=b.messages[1:],
        request=ContextRequest("gpt-4o", 10**6, format=fmt),
        spec=SPEC,
        count=count,
    )  # type: ignore[arg-type]


def summary_part(ctx: Context) -> int:
    """Tokens of the system prompt and the summary: every unit before the first message's."""
    return sum(tokens for what, tokens in ctx.units if what.startswith(("system:", "summary")))


@settings(max_examples=150, deadline=None)
@given(before=lines, more=lines)
def test_an_extended_summary_keeps_the_previous_summary_cacheable(before: list[str], more: list[str]) -> None:
    first = served(before, summary_id="s1")
    second = served([*before, *more], summary_id="s2")
    # Everything up to the end of the previous summary's text is rendered again.
    assert common_prefix_tokens(first.units, second.units) == summary_part(first)


@settings(max_examples=150, deadline=None)
@given(text=lines)
def test_the_summary_units_add_up_to_what_the_context_costs(text: list[str]) -> None:
    ctx = served(text, summary_id="s")
    assert sum(tokens for _, tokens in ctx.units) + SPEC.reply_priming == ctx.token_count
    assert ctx.token_count == count_messages(list(ctx.messages), SPEC, get_encoding("o200k_base"))


@given(before=lines, after=lines)
def test_a_rewritten_summary_shares_only_what_comes_before_its_first_changed_line(
    before: list[str], after: list[str]
) -> None:
    first, second = served(before, summary_id="s1"), served(after, summary_id="s2")
    same = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b), None)
    shared = common_prefix_tokens(first.units, second.units)
    if same is not None:  # the units up to the first line that differs, no further
        assert shared == sum(tokens for _, tokens in first.units[: 2 + same])
    else:
        assert shared >= sum(tokens for _, tokens in first.units[:2])  # the system prompt and the header


def test_anthropic_caches_the_summary_block_whole() -> None:
    """Anthropic's cache matches at block boundaries and the summary is one block: an extended
    summary is a new block, shared only up to the system prompt's."""
    first = served(["- asked about overtime"], summary_id="s1", fmt="anthropic")
    second = served(["- asked about overtime", "- asked about leave"], summary_id="s2", fmt="anthropic")
    assert common_prefix_tokens(first.units, second.units) == first.units[0][1]
