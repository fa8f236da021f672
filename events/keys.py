"""Conversation keys and the partitioner.

The Kafka record key of every event is ``tenant_id:user_id:conversation_id`` in UTF-8. The
key decides the partition with Kafka's default murmur2 partitioner, so producers written in
Java, Go or anything else that uses murmur2 put a conversation on the same partition.

Encoding rule (escape, not refuse): inside each part a backslash is written ``\\\\`` and a
colon ``\\:``. Ids without ``:`` or ``\\`` — the usual case — encode exactly as the naive
``f"{tenant}:{user}:{conversation}"``, so foreign producers agree with convlog; ids that do
contain them still give one unambiguous key (``a:b`` as a user id never collides with user
``a`` plus conversation ``b``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from events.errors import InvalidKeyError

MAX_KEY_PART_LENGTH = 256
_SEPARATOR = ":"
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
_ESCAPE = "\\"


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """Who a conversation belongs to: tenant, user, conversation. All three are required."""

    tenant_id: str
    user_id: str
    conversation_id: str
    _text: str = field(init=False, repr=False, compare=False)  # the encoded form, built once

    def __post_init__(self) -> None:
        for name in ("tenant_id", "user_id", "conversation_id"):
            check_key_part(name, getattr(self, name))
        text = _SEPARATOR.join(_escape(p) for p in (self.tenant_id, self.user_id, self.conversation_id))
        object.__setattr__(self, "_text", text)

    def __str__(self) -> str:
        return self._text

    def encode(self) -> bytes:
        """The Kafka record key."""
        return self._text.encode("utf-8")

    @classmethod
    def parse(cls, raw: str | bytes) -> ConversationKey:
        """Inverse of :meth:`encode` / ``str()``; raises :class:`InvalidKeyError`."""
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InvalidKeyError("key is not valid UTF-8", field="key") from e
        parts = _split(raw)
        if len(parts) != 3:
            raise InvalidKeyError(
                f"expected tenant:user:conversation (3 parts), got {len(parts)} in {raw!r}", field="key"
            )
        return cls(parts[0], parts[1], parts[2])


def check_key_part(field: str, value: object) -> None:
    """Refuse a tenant, user or conversation id a record key cannot carry (:class:`InvalidKeyError`)."""
    if not isinstance(value, str):
        raise InvalidKeyError(f"must be a string, got {type(value).__name__}", field=field)
    if not value or not value.strip():
        raise InvalidKeyError("must not be empty", field=field)
    if len(value) > MAX_KEY_PART_LENGTH:
        raise InvalidKeyError(f"longer than {MAX_KEY_PART_LENGTH} characters", field=field)
    if _CONTROL_CHARS.search(value):
        raise InvalidKeyError("must not contain control characters", field=field)


def _escape(part: str) -> str:
    return part.replace(_ESCAPE, _ESCAPE * 2).replace(_SEPARATOR, _ESCAPE + _SEPARATOR)


def _split(raw: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    chars = iter(raw)
    for c in chars:
        if c == _ESCAPE:
            nxt = next(chars, None)
            if nxt not in (_ESCAPE, _SEPARATOR):
                raise InvalidKeyError(f"dangling or unknown escape in {raw!r}", field="key")
            current.append(nxt)
        elif c == _SEPARATOR:
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
    parts.append("".join(current))
    return parts


_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: 32-bit murmur2 with seed 0x9747b28c, as a signed int."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    tail = length & ~3
    for i in range(0, tail, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest:
        if rest == 3:
            h ^= data[tail + 2] << 16
        if rest >= 2:
            h ^= data[tail + 1] << 8
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partition_count: int) -> int:
    """The partition the Java client's default partitioner picks for a keyed record."""
    if partition_count < 1:
        raise ValueError("partition_count must be >= 1")
    return (murmur2(key) & 0x7FFFFFFF) % partition_count
