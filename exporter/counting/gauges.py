"""A library's live state, read in the cycle's snapshot: gauges per job type, by name, and the
queue's Snapshot made from them. No I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from exporter.model import (
    ActiveStats,
    CountingError,
    Coverage,
    JobType,
    PresetJobTypes,
    Row,
    Snapshot,
)
from exporter.vocabulary import Status


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
class Reading:
    """What one collection cycle produced: gauges now, and whether counting has begun."""

    taken_at: float
    gauges: dict[str, Gauges]
    counting: bool  # False until the reader has a safe baseline (see docs/presets.md)
    rows_read: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def first(rows: Sequence[Row]) -> Row:
    """The single row a one-row query returned."""
    if len(rows) != 1:
        raise CountingError(f"expected one row, got {len(rows)}")
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


def reading_of(results: Mapping[str, Sequence[Row]], counting: bool) -> Reading:
    """A cycle's Reading from its "snapshot" and "gauges" rows (and how many rows each read)."""
    return Reading(
        taken_at=float(first(results["snapshot"])["now"]),
        gauges=gauges_from(results["gauges"]),
        counting=counting,
        rows_read={name: len(rows) for name, rows in results.items()},
    )


def seconds(value: object) -> float | None:
    """A figure of a row in seconds, or None where the library could not tell it (NULL)."""
    return float(value) if isinstance(value, int | float) else None


def snapshot_of(reading: Reading, labels: PresetJobTypes, coverage: Coverage) -> Snapshot:
    """The reading's gauges as the exporter's snapshot, keyed by job type number."""
    active: dict[JobType, ActiveStats] = {}
    held: dict[JobType, int] = {}
    for name, gauges in reading.gauges.items():
        number = labels.number(name)
        active[number] = ActiveStats(
            pending=gauges.pending,
            running=gauges.running,
            scheduled=gauges.scheduled,
            oldest_pending_age=max(0.0, gauges.oldest_pending_age),
            oldest_ready_wait=max(0.0, gauges.oldest_ready_wait),
            stuck_lease_expired=gauges.stuck,
            running_oldest=max(0.0, gauges.running_oldest),
        )
        held[number] = gauges.held
    dead = held if Status.DEAD in coverage.statuses else None
    return Snapshot(taken_at=reading.taken_at, active=active, dead=dead)
