"""The transition cursor as a counting mode: statements out, rows in, one at a time, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from exporter.counting.tracker import TrackerOptions
from exporter.counting.transitions import CursorOptions, TransitionCursor
from exporter.model import Collected, Cycle, JobTypeLabels, Query, Row, Tallies
from exporter.vocabulary import Status

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NAMES = ("horizon", "snapshot", "dead", "done", "active", "dead_ids", "changes_after",
         "existing", "recheck")  # fmt: skip


def mode(max_rows: int = 10) -> TransitionCursor:
    options = CursorOptions(TrackerOptions(commit_lag_tolerance=30.0), max_rows=max_rows)
    bounds = (1.0,)
    return TransitionCursor(
        {name: name for name in NAMES},
        options,
        JobTypeLabels({}, 50),
        Tallies(bounds, bounds, bounds),
    )


def horizon(seconds: float) -> Row:
    at = T0 + timedelta(seconds=seconds)
    return {"now": at, "lower_bound": at, "hidden": 0, "prepared": 0}


def quiet(now: float) -> list[Row]:
    """The snapshot of a queue with no active job: one row, the clock only."""
    return [{"now": now, "kind": None, "job_type": None, "jobs": None}]


def waiting(now: float, jobs: int) -> list[Row]:
    """The snapshot of a queue with ``jobs`` pending jobs of type 3 and nothing running."""
    return [{"now": now, "kind": Status.PENDING, "job_type": 3, "jobs": jobs, "scheduled": 0,
             "oldest_pending_age": 0.0, "oldest_ready_wait": 0.0}]  # fmt: skip


def changed(job: int, seconds: float) -> Row:
    """A job inserted (pending) at ``seconds``, as changes_after returns it."""
    at = T0.timestamp() + seconds
    return {
        "job_id": f"00000000-0000-0000-0000-{job:012d}", "job_type": 3, "status": Status.PENDING,
        "attempts": 0, "max_attempts": 3, "last_error": None, "run_after": at,
        "run_started_at": None, "created_at": at, "updated_at": at,
        "updated_key": T0 + timedelta(seconds=seconds), "wait_seconds": None,
        "latency_seconds": None,
    }  # fmt: skip


def run(cycle: Cycle, answers: dict[str, list[Sequence[Row] | None]]) -> tuple[list[Query], Any]:
    """Drive a cycle as the runner does; ``answers`` by statement name, consumed in order."""
    asked: list[Query] = []
    rows: Sequence[Row] | None = None
    try:
        while True:
            query = cycle.send(rows)
            asked.append(query)
            rows = answers[query.name].pop(0)
    except StopIteration as stop:
        return asked, stop.value


def test_the_baseline_reads_the_active_rows_and_counts_nothing() -> None:
    cursor = mode()
    asked, collected = run(
        cursor.cycle(horizon(100.0)),
        {"snapshot": [quiet(100.0)], "dead": [[]], "active": [[]], "dead_ids": [[]]},
    )
    assert [q.name for q in asked] == ["snapshot", "dead", "active", "dead_ids"]
    assert isinstance(collected, Collected)
    assert collected.counting
    assert cursor.tallies.counters()["enqueued"] == {}


def test_changes_come_in_deferrable_chunks_and_an_unrun_chunk_leaves_the_cursor_behind() -> None:
    cursor = mode(max_rows=2)
    run(cursor.cycle(horizon(100.0)),
        {"snapshot": [quiet(100.0)], "dead": [[]], "active": [[]],
         "dead_ids": [[]]})  # fmt: skip
    # Three inserts below the next bound: a full chunk, then the runner's budget is spent.
    first = [changed(1, 100.5), changed(2, 101.0)]
    asked, collected = run(
        cursor.cycle(horizon(110.0)),
        {"snapshot": [quiet(110.0)], "changes_after": [first, None]},
    )
    chunks = [q for q in asked if q.name == "changes_after"]
    assert [q.deferrable for q in chunks] == [True, True]
    # The second chunk starts where the first one ended (a statement that depends on rows read).
    assert chunks[1].args[:2] == (first[-1]["updated_key"], first[-1]["job_id"])
    assert collected.behind
    assert collected.rows_read == 2
    assert cursor.tallies.enqueued == {"3": 2}
    # The next cycle goes on from there and catches up.
    asked, collected = run(
        cursor.cycle(horizon(111.0)),
        {"snapshot": [waiting(111.0, 3)], "changes_after": [[changed(3, 102.0)]]},
    )
    assert not collected.behind
    assert cursor.tallies.enqueued == {"3": 3}


def test_the_snapshot_rows_of_each_status_make_one_figure_per_job_type() -> None:
    def part(kind: int, job_type: int, jobs: int, **figures: float) -> Row:
        zero = dict.fromkeys(
            ("scheduled", "oldest_pending_age", "oldest_ready_wait", "stuck_lease_expired",
             "stuck_overrun", "lease_expired_oldest", "running_oldest"), 0,
        )  # fmt: skip
        return {"now": 100.0, "kind": kind, "job_type": job_type, "jobs": jobs, **zero, **figures}

    rows = [
        part(1, 3, 5, scheduled=2, oldest_pending_age=40.0, oldest_ready_wait=-0.5),
        part(2, 3, 1, stuck_lease_expired=1, lease_expired_oldest=7.0, running_oldest=30.0),
        part(2, 4, 2, stuck_overrun=1, running_oldest=900.0),
    ]
    cursor = mode()
    _, collected = run(
        cursor.cycle(horizon(100.0)),
        {"snapshot": [rows], "dead": [[]], "active": [[]], "dead_ids": [[]]},
    )
    active = collected.snapshot.active
    assert (active[3].pending, active[3].running, active[3].scheduled) == (5, 1, 2)
    assert (active[3].oldest_pending_age, active[3].oldest_ready_wait) == (40.0, 0.0)
    assert (active[3].stuck_lease_expired, active[3].lease_expired_oldest) == (1, 7.0)
    assert (active[4].pending, active[4].running, active[4].stuck_overrun) == (0, 2, 1)
    assert active[4].running_oldest == 900.0
    assert collected.snapshot.taken_at == 100.0
