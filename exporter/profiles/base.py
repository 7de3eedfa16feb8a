"""What every preset reader shares: queries as data, the per-cycle reading, the tallies.

No I/O: a reader hands out :class:`Query` values, the caller runs them (see docs/presets.md,
"Interface") and passes the rows back. Times are Unix seconds from the database's clock.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

from exporter.counting.cycle import PresetError, Query, Results, Row
from exporter.model import Histogram

__all__ = ["PresetError", "Query", "Results", "Row"]

Exactness = Literal["exact", "approximate", "not exported"]
# Every preset reads its active jobs' gauges straight from the live table, so all are exact.
EXACT_GAUGES: dict[str, Exactness] = dict.fromkeys(
    (
        "pending",
        "running",
        "scheduled",
        "oldest_pending_age",
        "oldest_ready_wait",
        "running_oldest",
        "stuck",
    ),
    "exact",
)

# One failure reason for libraries that store none (procrastinate) or only the last one.
UNKNOWN_REASON = "unknown"

DURATION_BOUNDS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
WAIT_BOUNDS = (0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)


@dataclass(frozen=True)
class Gauges:
    """The live state of one job type, read in the collection's snapshot."""

    pending: int = 0
    running: int = 0
    scheduled: int = 0  # pending, run-after in the future (included in pending)
    oldest_pending_age: float = 0.0  # now - creation of the oldest pending job
    oldest_ready_wait: float = 0.0  # now - the moment the oldest ready job became ready
    running_oldest: float = 0.0  # now - start of the longest-running attempt
    stuck: int = 0  # running, by the library's own notion of a lost worker
    held: int = 0  # permanently failed rows the library keeps for a human (pgqueuer "hold")


@dataclass
class Tallies:
    """Counters and histograms since the reader's baseline, keyed by job type.

    The bounds default to the ones the preset tests were written with; the exporter passes the
    queue's configured buckets, so a preset queue's histograms have the same le values as any.
    """

    enqueued: Counter[str] = field(default_factory=Counter)
    completed: Counter[str] = field(default_factory=Counter)
    failures: Counter[tuple[str, str]] = field(default_factory=Counter)  # failed attempts
    dead: Counter[tuple[str, str]] = field(default_factory=Counter)  # permanently failed
    requeued: Counter[str] = field(default_factory=Counter)  # retries, manual or automatic
    cancelled: Counter[str] = field(default_factory=Counter)
    duration: dict[str, Histogram] = field(default_factory=dict)
    wait: dict[str, Histogram] = field(default_factory=dict)
    latency: dict[str, Histogram] = field(default_factory=dict)
    duration_bounds: tuple[float, ...] = DURATION_BOUNDS
    wait_bounds: tuple[float, ...] = WAIT_BOUNDS
    latency_bounds: tuple[float, ...] = WAIT_BOUNDS

    def observe(
        self, job_type: str, duration: float | None, wait: float | None, latency: float | None
    ) -> None:
        """Record one completed job in whichever histograms the preset can fill exactly."""
        for table, bounds, value in (
            (self.duration, self.duration_bounds, duration),
            (self.wait, self.wait_bounds, wait),
            (self.latency, self.latency_bounds, latency),
        ):
            if value is not None:
                found = table.get(job_type)
                if found is None:
                    found = table[job_type] = Histogram(bounds)
                found.observe(value)

    def counters(self) -> dict[str, dict[Any, int]]:
        """Every counter as plain dicts without zeros, for comparisons and logs."""
        return {
            name: {key: value for key, value in counter.items() if value}
            for name, counter in (
                ("enqueued", self.enqueued),
                ("completed", self.completed),
                ("failures", self.failures),
                ("dead", self.dead),
                ("requeued", self.requeued),
                ("cancelled", self.cancelled),
            )
        }


@dataclass
class Reading:
    """What one collection cycle produced: gauges now, and whether counting has begun."""

    taken_at: float
    gauges: dict[str, Gauges]
    counting: bool  # False until the reader has a safe baseline (see docs/presets.md)
    rows_read: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RetentionHint:
    """What the library deletes and when, so the exporter can warn about lost history."""

    rows_deleted_on_success: bool
    history_kept: str
    warning: str


def _blocks(file: str) -> dict[str, str]:
    text = resources.files("exporter.profiles").joinpath(f"sql/{file}").read_text(encoding="utf-8")
    blocks: dict[str, str] = {}
    for chunk in re.split(r"^-- name: ", text, flags=re.MULTILINE)[1:]:
        name, _, body = chunk.partition("\n")
        blocks[name.strip()] = body.strip()
    return blocks


def load_queries(preset: str, *, event_log: str | None = None) -> dict[str, str]:
    """The statements of profiles/sql/<preset>.sql plus the shared ones (sql/shared.sql):
    the snapshot, and with ``event_log`` (the log table) the event-log horizon."""
    shared = _blocks("shared.sql")
    blocks = {"snapshot": shared["snapshot"], **_blocks(f"{preset}.sql")}
    if event_log is not None:
        blocks["horizon"] = shared["eventlog_horizon"].replace("{log}", event_log)
    return {name: sql.replace("{sessions}", shared["sessions"]) for name, sql in blocks.items()}


def first(rows: Sequence[Row]) -> Row:
    """The single row a one-row query returned."""
    if len(rows) != 1:
        raise PresetError(f"expected one row, got {len(rows)}")
    return rows[0]


def gauges_from(rows: Sequence[Row]) -> dict[str, Gauges]:
    """Turn the gauge query's rows (one per job type and source) into summed Gauges."""
    out: dict[str, Gauges] = {}
    for row in rows:
        job_type = str(row["job_type"])
        old = out.get(job_type, Gauges())
        out[job_type] = Gauges(
            pending=old.pending + int(row.get("pending") or 0),
            running=old.running + int(row.get("running") or 0),
            scheduled=old.scheduled + int(row.get("scheduled") or 0),
            oldest_pending_age=max(
                old.oldest_pending_age, float(row.get("oldest_pending_age") or 0)
            ),
            oldest_ready_wait=max(old.oldest_ready_wait, float(row.get("oldest_ready_wait") or 0)),
            running_oldest=max(old.running_oldest, float(row.get("running_oldest") or 0)),
            stuck=old.stuck + int(row.get("stuck") or 0),
            held=old.held + int(row.get("held") or 0),
        )
    return out
