"""When a failed call is tried again, and after how long: exponential backoff with jitter,
bounded by a number of tries and a total time.

What may be retried is decided per call (:class:`Repeat`): reads and erases always (repeating
them changes nothing), message appends always because the client sends every append with an
``Idempotency-Key`` — one it made when the caller gave none — and the same key on every try, so
a try the service stored but whose answer was lost is answered as the repeat it is, never
stored twice. A clear takes no key (a repeated clear starts another new chat): it is retried
only when the request never left the client (the connection could not be made).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from convlog.client.errors import ClientError


class Repeat(enum.Enum):
    """Which failures of a call may be retried."""

    SAFE = "safe"  # every retriable failure: reads, erases, appends with their Idempotency-Key
    UNSENT = "unsent"  # only when the request was not sent (connect failures)
    NEVER = "never"  # probes: their answer is the point


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``attempts`` tries in all (the first included); the n-th retry waits
    ``min(max_backoff_s, backoff_s * 2**n)``, jittered down to half of it ("equal jitter": tries
    of many clients spread out, none waits less than half), or the service's ``Retry-After``
    when that is longer. No retry starts once its wait would end more than ``total_s`` after the
    first try began; then the last failure is raised."""

    attempts: int = 4
    backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    # Longer than serve's default wait for Kafka's acknowledgement (CONVLOG_KAFKA_ACK_TIMEOUT_S,
    # 30 s): a client gives up on an append only after the service has stopped waiting for it, so
    # its last try, with the same Idempotency-Key, finds the append if it landed late.
    total_s: float = 45.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.backoff_s < 0 or self.max_backoff_s < 0 or self.total_s < 0:
            raise ValueError(f"a retry policy needs attempts >= 1 and waits >= 0, not {self}")

    def wait_s(self, retry: int, error: ClientError, rng: random.Random) -> float:
        """The wait before retry number ``retry`` (0 for the first) after ``error``."""
        base = min(self.max_backoff_s, self.backoff_s * 2.0**retry)
        wait = base / 2 + rng.random() * base / 2
        return max(wait, error.retry_after_s or 0.0)

    def next_wait_s(
        self, retry: int, error: ClientError, *, repeat: Repeat, sent: bool, elapsed_s: float, rng: random.Random
    ) -> float | None:
        """The wait before trying again, or None: give up and raise ``error``."""
        if retry + 1 >= self.attempts or not error.retriable or repeat is Repeat.NEVER:
            return None
        if repeat is Repeat.UNSENT and sent:
            return None
        wait = self.wait_s(retry, error, rng)
        return None if elapsed_s + wait > self.total_s else wait


NO_RETRY = RetryPolicy(attempts=1)
