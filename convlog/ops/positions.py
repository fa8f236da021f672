"""``convlog positions``: how far each projection version and each summarizer consumer got.

Per partition: the stored next offset, the log's end (high watermark) and the lag between
them. A partition a projection never wrote a position for counts from 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from events.log import EventLog
from pgstore.pool import PgPool, pg_errors
from pgstore.positions import reader_positions
from pgstore.registry import known_versions
from projectors.window import WindowPolicy


@dataclass(frozen=True, slots=True)
class PositionRow:
    reader: str  # "read_models v3 (live)" or "summarizer <consumer>"
    partition: int
    position: int
    end: int

    @property
    def lag(self) -> int:
        return max(0, self.end - self.position)


async def collect_positions(pool: PgPool, event_log: EventLog) -> list[PositionRow]:
    """Every projection version that is not retired, then every summarizer consumer."""
    ends = await event_log.end_offsets()
    rows: list[PositionRow] = []
    with pg_errors("read the stored positions"):
        stored = await reader_positions(pool)
    for v in stored.versions:
        reader = f"{v.projection} v{v.version} ({v.status})"
        rows += [PositionRow(reader, p, v.positions.get(p, 0), end) for p, end in sorted(ends.items())]
    for consumer, positions in stored.summarizers.items():
        rows += [PositionRow(f"summarizer {consumer}", p, positions.get(p, 0), end) for p, end in sorted(ends.items())]
    return rows


async def window_lines(pool: PgPool, settings_policy: WindowPolicy) -> list[str]:
    """Each version's window policy (it keeps its own), and the settings' when they differ: what
    the next ``convlog rebuild`` makes a version with."""
    with pg_errors("read the versions' window policies"):
        known = [v for v in await known_versions(pool) if v.status != "retired"]
    # Worded so that no line reads as a row of the table above (scripts parse those).
    lines = [
        f"{v.projection} v{v.version} ({v.status}) window: at most {v.policy.max_turns} turns, "
        f"dropping to {v.policy.keep_turns}"
        for v in known
    ]
    if any(v.policy != settings_policy for v in known):
        lines.append(
            f"the settings name at most {settings_policy.max_turns} turns, dropping to "
            f"{settings_policy.keep_turns} (CONVLOG_WINDOW_MAX_TURNS / KEEP_TURNS): "
            "the next convlog rebuild uses them"
        )
    return lines


def render_positions(rows: list[PositionRow]) -> str:
    width = max([len("reader"), *(len(r.reader) for r in rows)])
    lines = [f"{'reader':<{width}}  {'partition':>9}  {'position':>12}  {'log end':>12}  {'lag':>10}"]
    lines += [f"{r.reader:<{width}}  {r.partition:>9}  {r.position:>12}  {r.end:>12}  {r.lag:>10}" for r in rows]
    by_reader: dict[str, int] = {}
    for r in rows:
        by_reader[r.reader] = by_reader.get(r.reader, 0) + r.lag
    lines.append("")
    lines += [f"{reader:<{width}}  total lag {lag}" for reader, lag in by_reader.items()]
    return "\n".join(lines)
