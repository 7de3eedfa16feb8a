"""The River reader cycle by cycle, on rows shaped like river.sql's (no I/O): what it asks the
table for and what it keeps, where River's stamps are not the database's clock."""

from __future__ import annotations

from typing import Any

from exporter.counting.gauges import Reading
from exporter.counting.statediff import CHANGE_COLUMNS
from exporter.profiles.river import CLOCK_MARGIN, RiverReader

T0 = 1_000_000.0


def job(job_id: int, state: str, ended_at: float | None = None, **figures: Any) -> dict[str, Any]:
    """A ``changes`` row of river.sql."""
    out: dict[str, Any] = dict.fromkeys(CHANGE_COLUMNS, 0)
    out.update(id=job_id, job_type="email", state=state, error_kinds=[], cancel_mark=None,
               ended_at=ended_at, duration=0.5, wait=0.1, latency=1.0)  # fmt: skip
    out.update(figures)
    return out


class Cycles:
    """Drives the reader as exporter/db/cycle.py does, with the rows a test says the table has."""

    def __init__(self) -> None:
        self.reader = RiverReader()
        self.changes_args: list[tuple[Any, ...]] = []

    def run(self, at: float, last_id: int, changes: list[dict[str, Any]],
            active: list[int]) -> Reading:  # fmt: skip
        horizon = {"lower_bound": at, "hidden": 0, "prepared": 0, "last_id": last_id,
                   "read_at": at + 0.001, "id_cache": 1}  # fmt: skip
        queries = self.reader.queries(horizon)
        results: dict[str, list[dict[str, Any]]] = {
            "snapshot": [{"now": at, "snapshot": "100:100:"}],
            "gauges": [{"job_type": "email", "pending": len(active), "active_ids": active}],
        }
        names = [q.name for q in queries]
        if "states" in names:
            results["states"] = [{"pending": True}]
        if "changes" in names:
            self.changes_args.append(next(q.args for q in queries if q.name == "changes"))
            results["changes"] = changes
        return self.reader.apply(results)

    def baseline(self, rows: list[dict[str, Any]], active: list[int]) -> None:
        """The states, then a settled id, then the baseline: three cycles a second apart."""
        for step in range(3):
            reading = self.run(T0 + step, 10, rows, active)
        assert reading.counting


def test_the_jobs_last_seen_running_are_asked_for_by_id() -> None:
    cycles = Cycles()
    cycles.baseline([job(3, "running", attempt=1), job(4, "available")], [3, 4])
    cycles.run(T0 + 3, 10, [], [3, 4])
    assert cycles.changes_args[-1][3] == [3]  # not the waiting job 4


def test_a_completion_stamped_long_before_the_window_is_counted_once() -> None:
    # The completer held job 3 while it retried its write: finalized_at is far below the
    # window's bound, and only the lookup by id returns the row.
    cycles = Cycles()
    cycles.baseline([job(3, "running", attempt=1)], [3])
    held = job(3, "completed", ended_at=T0 - 10 * CLOCK_MARGIN, attempt=1)
    cycles.run(T0 + 3, 10, [held], [])
    cycles.run(T0 + 4, 10, [], [])
    assert cycles.reader.tallies.counters()["completed"] == {"email": 1}
    assert 3 not in cycles.reader.known  # below the windows and the watermark: forgotten


def test_a_finished_job_is_forgotten_only_once_no_range_can_return_it() -> None:
    # Job 12 is new, seen running, then ends with its write held by the completer: stamped
    # below the window. It is forgotten once the watermark has passed its id too, so the id
    # range of the next cycle cannot return it as a job back by hand.
    cycles = Cycles()
    cycles.baseline([], [])
    cycles.run(T0 + 3, 12, [job(12, "running", attempt=1)], [12])
    done = job(12, "completed", ended_at=T0 - 2 * CLOCK_MARGIN, attempt=1)
    cycles.run(T0 + 4, 12, [done], [])
    assert cycles.changes_args[-1][2] < 12  # this cycle's id range could still return it...
    cycles.run(T0 + 5, 12, [], [])
    assert cycles.changes_args[-1][2] >= 12  # ...the next one's cannot
    assert 12 not in cycles.reader.known
    counters = cycles.reader.tallies.counters()
    assert (counters["enqueued"], counters["completed"]) == ({"email": 1}, {"email": 1})
    assert counters["requeued"] == {}


def test_an_end_stamped_below_the_window_of_a_job_never_seen_running_is_refused() -> None:
    # Such a stamp is a worker clock behind by more than the margin: a job such a clock saw
    # start and end between two cycles would be missed, so the cycle fails, loudly.
    import pytest

    from exporter.model import CountingError

    cycles = Cycles()
    cycles.baseline([], [])
    with pytest.raises(CountingError, match="clock is more than 60 s behind"):
        cycles.run(T0 + 3, 12, [job(12, "completed", ended_at=T0 - 2 * CLOCK_MARGIN)], [])
