"""``/readyz`` of ``convlog serve``: this instance's own dependencies, nothing it does not run.

Every instance needs the log (its producer's brokers answer) and Postgres. An instance that
runs the projector also needs that loop alive and not waiting out an outage. An API-only
instance (``--no-projector``) runs none: it does not report one and does not fail for want of
one — a projector outage leaves the API able to take appends and serve what is projected, so
a load balancer must keep routing to it (read-your-writes waits then answer 503
``not_caught_up``, which says so). Its report carries the live version's lag over every
partition instead, so a dead projector group shows up there (and in the metrics).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from convlog.runtime.log_guard import LogGuard
from convlog.runtime.projecting import LiveProjector
from events.embedded_log import EmbeddedEventLog
from events.log import EventLog
from pgstore.pool import PgPool
from pgstore.server import ping
from query_api.metrics import Metrics
from query_api.ports import ReadModels


class Readiness:
    """``/readyz``: Kafka (or the embedded log, with room for appends) and Postgres answer;
    with a projector here, its loop runs and is not waiting out an outage. A projector task that
    ended (crashed or returned) is not ready whatever else holds; the report says why, and gives
    no lag (it owns no partitions then, so any figure would read as "caught up")."""

    def __init__(
        self,
        projector: LiveProjector | None,
        event_log: EventLog,
        pool: PgPool,
        metrics: Metrics,
        background: Mapping[str, asyncio.Task[None]],
        *,
        guard: LogGuard,
        roles: list[str],
        reads: Callable[[], Awaitable[ReadModels]],
        listening: Callable[[], bool],
        log_timeout_s: float = 2.0,
    ) -> None:
        self._projector, self._log, self._pool, self._metrics = projector, event_log, pool, metrics
        self._background, self._guard, self._roles = background, guard, roles
        self._reads, self._listening, self._log_timeout_s = reads, listening, log_timeout_s

    def alive(self) -> str | None:
        """``/healthz``: why this process cannot work again until it is restarted (its embedded
        log stopped after a failed write), or None. Nothing a restart does not cure: Kafka or
        Postgres down is a matter for ``/readyz``."""
        return self._log.failed if isinstance(self._log, EmbeddedEventLog) else None

    def _running(self, name: str) -> bool:
        task = self._background.get(name)
        return task is not None and not task.done()

    def _ended(self, name: str) -> str | None:
        """Why the background task ``name`` is not running (None while it runs)."""
        task = self._background.get(name)
        if task is None:
            return "not started"
        if not task.done():
            return None
        if task.cancelled():
            return "cancelled"
        error = task.exception()
        return "exited" if error is None else f"crashed: {type(error).__name__}: {error}"

    async def __call__(self) -> dict[str, Any]:
        report: dict[str, Any] = {"roles": self._roles}
        ended = None
        if self._projector is not None:
            ended = self._ended("projector")
            report["projector"] = self._projector.ready and ended is None
            if ended is not None:
                report["projector_error"] = ended
        if "summarizer" in self._background:  # summaries are optional: contexts stay valid without them
            report["summarizer"] = self._running("summarizer")
        try:
            # Bounded: Kafka answers end offsets once every partition has a leader, so during a
            # leader election an unbounded probe would hang on every instance at once.
            ends = await asyncio.wait_for(self._log.end_offsets(), self._log_timeout_s)
            report["log"] = True
        except TimeoutError:
            ends = None
            report["log"] = False
            report["log_error"] = (
                f"the log's end offsets did not come within {self._log_timeout_s:g} s "
                "(brokers unreachable, or a partition without a leader)"
            )
        except Exception as e:  # noqa: BLE001 - readiness reports any failure
            ends = None
            report["log"], report["log_error"] = False, str(e)
        if report["log"] and isinstance(self._log, EmbeddedEventLog) and (full := self._log.storage_full()):
            report["log"], report["log_error"] = False, full  # it answers reads, but cannot take appends
        try:
            await ping(self._pool)
            report["postgres"] = True
        except Exception as e:  # noqa: BLE001
            report["postgres"], report["postgres_error"] = False, str(e)
        if ends is not None:
            report["lag"] = await self._lag(ends, report) if ended is None else None
        if self._projector is None:
            # How read-your-writes waits learn of the projectors' commits: at once while
            # listening, else by polling (slower, still correct) — not a reason to be unready.
            report["positions_listener"] = self._listening()
        if self._guard.behind:  # appends are refused until an operator resolves it
            report["log_behind_read_models"] = self._guard.detail()
        ready = report.get("projector", True) and report["log"] and report["postgres"] and not self._guard.behind
        report["ready"] = bool(ready)
        return report

    async def _lag(self, ends: Mapping[int, int], report: dict[str, Any]) -> int | None:
        """Records not projected yet: of this process's partitions when it projects (a group
        shares them), else of every partition by the live version's positions."""
        if self._projector is not None:
            positions: Mapping[int, int] = self._projector.positions
        elif report["postgres"]:
            try:
                reads = await self._reads()
                positions = {p: await reads.projection_position(p) for p in ends}
            except Exception as e:  # noqa: BLE001 - the lag is information, not a condition
                report["lag_error"] = str(e)
                return None
        else:
            return None
        lag = {p: max(0, ends[p] - o) for p, o in positions.items() if p in ends}
        for p, n in lag.items():
            self._metrics.projection_lag.labels(str(p)).set(n)
        return sum(lag.values())
