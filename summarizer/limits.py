"""The size limit every summary obeys, whichever model wrote it (the runner enforces it on the
OpenAI-compatible model's answers and the offline model on its own), measured in one encoding."""

from __future__ import annotations

from projectors.tokens import cached_counter, cut_to_tokens

SUMMARY_ENCODING = "o200k_base"  # summary sizes are measured in it, whatever model serves them


def count_tokens(text: str) -> int:
    """Tokens of ``text`` in :data:`SUMMARY_ENCODING`."""
    return cached_counter(SUMMARY_ENCODING)(text)


def enforce_limit(text: str, max_tokens: int) -> tuple[str, bool]:
    """``text`` cut to at most ``max_tokens`` tokens (at a line or word end when one is near);
    the flag says whether it had to be cut. Models overrun instructions: the limit is ours."""
    cut = cut_to_tokens(text, max_tokens, SUMMARY_ENCODING)
    if cut is None:
        return text, False
    for sep in ("\n", ". ", " "):
        at = cut.rfind(sep)
        if at >= len(cut) * 3 // 4:
            cut = cut[: at + (1 if sep == ". " else 0)]
            break
    return cut.rstrip(), True
