"""The django-tasks reader's counting, cycle by cycle, on rows shaped like its queries' (no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.counting.gauges import Reading
from exporter.counting.window import EnqueueWindow
from exporter.model import CountingError
from exporter.profiles import PRESETS
from exporter.profiles.django_tasks import ACTIVE, CLOCK_MARGIN, DjangoTasksReader
from exporter.profiles.mapping import NEVER_FILLED, coverage_of
from exporter.vocabulary import ERROR, Status

T0 = 1_000_000.0


def horizon(lower_bound: float, prepared: int = 0) -> dict[str, Any]:
    return {"lower_bound": lower_bound, "hidden": 0, "prepared": prepared}


def row(task_id: str, status: str, enqueued_at: float, task: str = "app.send",
        exception: str = "") -> dict[str, Any]:  # fmt: skip
    return {"id": task_id, "job_type": task, "status": status, "exception_class_path": exception,
            "enqueued_at": enqueued_at, "duration": 1.0, "wait": 0.5, "latency": 2.0}  # fmt: skip


def gauge(active: list[str], task: str = "app.send") -> dict[str, Any]:
    return {"job_type": task, "pending": len(active), "active_ids": active}


class Cycles:
    """Drives a reader as exporter/db/cycle.py does, with the rows a test says the table has."""

    def __init__(self) -> None:
        self.reader = DjangoTasksReader()
        self.args: list[tuple[Any, ...]] = []

    def run(self, at: float, changes: list[dict[str, Any]], active: list[str],
            prepared: int = 0) -> Reading:  # fmt: skip
        queries = self.reader.queries(horizon(at, prepared))
        self.args.append(next((q.args for q in queries if q.name == "changes"), ()))
        results = {"snapshot": [{"now": at, "snapshot": "1:1:"}], "gauges": [gauge(active)]}
        if any(q.name == "changes" for q in queries):
            results["changes"] = changes
        return self.reader.apply(results)


def test_history_before_the_baseline_is_never_counted() -> None:
    cycles = Cycles()
    reading = cycles.run(T0, [row("done", "SUCCESSFUL", T0 - 5), row("wait", "READY", T0 - 5)],
                         ["wait"])  # fmt: skip
    assert reading.counting
    cycles.run(T0 + 15, [row("done", "SUCCESSFUL", T0 - 5), row("wait", "READY", T0 - 5)], ["wait"])
    assert cycles.reader.tallies.counters()["enqueued"] == {}
    assert cycles.reader.tallies.counters()["completed"] == {}


def test_a_task_waiting_at_the_baseline_counts_its_end_but_not_its_enqueue() -> None:
    cycles = Cycles()
    cycles.run(T0, [], ["old"])  # enqueued long before the window
    assert cycles.args[-1][1] == []
    cycles.run(T0 + 15, [row("old", "SUCCESSFUL", T0 - 3600)], [])
    assert cycles.args[-1][1] == ["old"]  # looked up by primary key: it was active
    tallies = cycles.reader.tallies
    assert tallies.counters()["completed"] == {"app.send": 1}
    assert tallies.counters()["enqueued"] == {}
    assert tallies.duration["app.send"].count == 1


def test_a_task_enqueued_and_finished_between_cycles_counts_once_in_every_window() -> None:
    cycles = Cycles()
    cycles.run(T0, [], [])
    failed = row("f", "FAILED", T0 + 3, task="app.bill", exception="builtins.ValueError")
    for at in (T0 + 15, T0 + 30, T0 + 45):  # the overlapping windows return it again
        cycles.run(at, [row("t", "SUCCESSFUL", T0 + 2), failed], [])
    counters = cycles.reader.tallies.counters()
    assert counters["enqueued"] == {"app.send": 1, "app.bill": 1}
    assert counters["completed"] == {"app.send": 1}
    # One failed attempt that is also the task's death: the backend does not retry. The
    # exception's class path is an unbounded label value: it counts as an error.
    assert counters["failures"] == {("app.bill", ERROR): 1}
    assert counters["dead"] == counters["failures"]
    assert counters["requeued"] == {}
    assert counters["cancelled"] == {}


def test_the_window_starts_a_clock_margin_before_the_previous_horizon_and_never_goes_back() -> None:
    cycles = Cycles()
    cycles.run(T0, [], [])
    cycles.run(T0 + 15, [], [])
    assert cycles.args[-1][0] == T0 - CLOCK_MARGIN
    cycles.run(T0 + 30, [], [], prepared=1)  # a prepared transaction: the bound holds
    cycles.run(T0 + 45, [], [])
    assert cycles.args[-1][0] == T0 + 15 - CLOCK_MARGIN
    cycles.run(T0 + 2, [], [])  # a long transaction started before: the bound stays
    cycles.run(T0 + 60, [], [])
    assert cycles.args[-1][0] == T0 + 45 - CLOCK_MARGIN


def test_an_active_task_outside_the_window_fails_the_collection() -> None:
    cycles = Cycles()
    cycles.run(T0, [], [])
    # Active now, not active before, not in the window: its enqueued_at is older than the
    # margin allows, so tasks like it that finished in between were missed.
    with pytest.raises(CountingError, match="outside the enqueued_at window"):
        cycles.run(T0 + 15, [], ["skewed"])


def test_a_finished_task_back_in_the_active_set_fails_the_collection() -> None:
    cycles = Cycles()
    cycles.run(T0, [], [])
    cycles.run(T0 + 15, [row("t", "SUCCESSFUL", T0 + 2)], [])
    with pytest.raises(CountingError):
        cycles.run(T0 + 30, [row("t", "READY", T0 + 2)], ["t"])


def test_an_active_task_deleted_before_its_end_is_read_is_not_counted_and_warned() -> None:
    cycles = Cycles()
    cycles.run(T0, [], ["gone"])
    reading = cycles.run(T0 + 15, [], [])
    assert cycles.reader.tallies.counters()["completed"] == {}
    assert len(reading.warnings) == 1
    assert "deleted" in reading.warnings[0]
    assert cycles.run(T0 + 30, [], []).warnings == []


def test_finished_ids_are_forgotten_once_no_window_can_return_them() -> None:
    diff = EnqueueWindow(ACTIVE)
    diff.absorb([row("a", "SUCCESSFUL", 10.0), row("b", "FAILED", 14.5)], set())
    diff.forget(15.0)  # b is kept: within a second of the bound, rounding could return it
    assert set(diff.finished) == {"b"}
    diff.forget(16.0)
    assert diff.finished == {}


def test_the_profile_exports_no_stuck_requeued_or_cancelled_series() -> None:
    coverage = coverage_of(PRESETS["django-tasks"].capabilities)
    assert coverage.statuses == (Status.PENDING, Status.RUNNING)
    assert coverage.stuck_reasons == ()  # no heartbeat or lease to call a task lost by
    assert coverage.failure_reasons == (ERROR,)  # exception class paths fold into error
    assert coverage.withheld == NEVER_FILLED | {"requeued", "cancelled"}
