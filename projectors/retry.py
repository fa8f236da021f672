"""Retrying an operation while it fails with a retriable store error — driver-free.

The projector and the summarizer retry their store calls through :func:`retrying`; their stores
(adapters) convert driver errors at the edge, so what reaches here is a
:class:`~events.errors.ConvlogError` whose ``retriable`` says what to do. An adapter whose driver
errors may still escape passes ``convert`` (the Postgres one is :func:`pgstore.pool.retrying`).
Capped exponential backoff with full jitter; with ``attempts=None`` an outage of any length is
waited out.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from events.errors import ConvlogError
from projectors.errors import StoreUnavailableError

__all__ = ["Convert", "retrying"]

T = TypeVar("T")
Convert = Callable[[BaseException, str], ConvlogError | None]
"""A driver exception raised while doing the action (its second argument) to its convlog error;
None: not the driver's, let it propagate."""


def _timeouts(e: BaseException, action: str) -> ConvlogError | None:
    if isinstance(e, TimeoutError | ConnectionError):
        error = StoreUnavailableError(f"{action}: store unavailable: {type(e).__name__}: {e}")
        error.__cause__ = e
        return error
    return None


async def retrying(
    op: Callable[[], Awaitable[T]],
    *,
    action: str,
    attempts: int | None = None,
    base_delay_s: float = 0.2,
    max_delay_s: float = 5.0,
    on_retry: Callable[[int, ConvlogError, float], None] | None = None,
    convert: Convert = _timeouts,
) -> T:
    """``await op()``, retrying it while it fails with a retriable store error.

    A :class:`StoreUnavailableError`, or an exception ``convert`` turns into a retriable error,
    is retried after a delay drawn uniformly from ``[0, min(max_delay_s, base_delay_s * 2**(n-1))]``
    (full jitter), with ``on_retry(n, error, delay)`` called and a ``pg.retry`` warning logged
    before retry ``n``. ``attempts`` caps the number of calls (None: retry forever). Other
    :class:`ConvlogError`\\ s (such as :class:`~projectors.errors.PositionConflictError`, whose
    remedy is the caller's) and exceptions ``convert`` leaves alone are raised at once. ``op``
    must be safe to repeat: a broken connection can hide whether a commit went through.
    """
    if attempts is not None and attempts < 1:
        raise ValueError(f"attempts must be >= 1 or None, got {attempts}")
    attempt = 0
    while True:
        attempt += 1
        try:
            return await op()
        except StoreUnavailableError as e:
            error: ConvlogError = e
        except ConvlogError:
            raise
        except Exception as e:
            converted = convert(e, action)
            if converted is None:
                raise
            if not converted.retriable:
                raise converted from e
            error = converted
        if attempts is not None and attempt >= attempts:
            raise error  # its __cause__ is the driver error
        delay = random.uniform(0.0, min(max_delay_s, base_delay_s * 2 ** (attempt - 1)))  # noqa: S311 - jitter
        structlog.get_logger("pgstore.pool").warning(
            "pg.retry",
            action=action,
            attempt=attempt,
            attempts=attempts,
            delay_s=round(delay, 3),
            code=error.code,
            sqlstate=_sqlstate(error),
            error=str(error),
        )
        if on_retry is not None:
            on_retry(attempt, error, delay)
        await asyncio.sleep(delay)


def _sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of the driver error behind ``error``, if any (drivers name it ``sqlstate``)."""
    current: BaseException | None = error
    while current is not None:
        sqlstate = getattr(current, "sqlstate", None)
        if isinstance(sqlstate, str):
            return sqlstate
        current = current.__cause__
    return None
