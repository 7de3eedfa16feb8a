"""The django-tasks preset: Django's tasks framework on its database backend (django-tasks-db).

django-tasks-db keeps one row per task: READY -> RUNNING -> SUCCESSFUL or FAILED, never back,
with no retry, no cancellation and no lease. A task can be enqueued and finished between two
cycles, and no column is stamped by the database, so the reader counts in two parts (the
argument is in docs/presets.md, "django-tasks"): the rows enqueued since the previous snapshot,
found in a window on ``enqueued_at`` whose lower bound is the previous horizon less a margin
for the enqueuing hosts' clocks; and the tasks the previous snapshot saw active that have
finished since, found by primary key. :class:`ActiveSetDiff` is that counting, with no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from exporter.counting.horizon import Horizon
from exporter.profiles.base import (
    EXACT_GAUGES,
    UNKNOWN_REASON,
    Exactness,
    PresetError,
    Query,
    Reading,
    Results,
    RetentionHint,
    Row,
    Tallies,
    first,
    gauges_from,
    load_queries,
)

PRESET = "django_tasks"  # the SQL file's name; the profile is spelled "django-tasks"
TABLE = "django_tasks_database_dbtaskresult"
ACTIVE = frozenset({"READY", "RUNNING"})
SUCCESSFUL = "SUCCESSFUL"
FAILED = "FAILED"
# enqueued_at is the enqueuing process's timezone.now(), taken just before its INSERT reaches
# the server: the window starts this much before the horizon, to cover that process's clock
# running behind the database's and the moment between the stamp and the statement.
CLOCK_MARGIN = 60.0

CAPABILITIES: dict[str, Exactness] = {
    **EXACT_GAUGES,
    "stuck": "not exported",  # no heartbeat or lease: a killed worker's task stays RUNNING
    "held": "not exported",  # a FAILED row is history, kept until pruned
    "enqueued": "exact",
    "completed": "exact",
    "failures": "exact",  # one per FAILED task: the backend does not retry
    "failure_reason": "not exported",  # exception class paths are unbounded: all are "error"
    "dead": "exact",  # the same FAILED tasks: without a retry, a failure is final
    "requeued": "not exported",  # no retry, and no way to put a finished task back
    "cancelled": "not exported",  # the backend cannot cancel a task
    "wait": "exact",
    "duration": "exact",
    "latency": "exact",
}

RETENTION = RetentionHint(
    rows_deleted_on_success=False,
    history_kept=(
        "every result until prune_db_task_results deletes finished ones "
        "(--min-age-days, 14 by default; --failed-min-age-days for failures)"
    ),
    warning=(
        "prune_db_task_results with --min-age-days 0 or --failed-min-age-days 0 deletes a "
        "result as soon as it finishes, which is shorter than two collection intervals: a "
        "task enqueued and finished between two cycles and pruned before the next is never "
        "counted. Any age of one day or more is safe"
    ),
)


@dataclass
class Step:
    """What one snapshot changed, by task id, as :meth:`ActiveSetDiff.step` found it."""

    enqueued: list[Row] = field(default_factory=list)  # new since the previous snapshot
    finished: list[Row] = field(default_factory=list)  # terminal for the first time
    deleted: set[str] = field(default_factory=set)  # were active, are gone without an end
    unexplained: set[str] = field(default_factory=set)  # active, yet found by neither read


@dataclass
class ActiveSetDiff:
    """Exactly-once counting over rows that are inserted active and turn terminal once.

    ``active`` holds every id the previous snapshot showed active; ``finished`` the terminal
    ids a later window can still return, with their window key, so a row is counted once
    however many windows return it. Every row the previous snapshot did not show comes back
    in this cycle's window (docs/presets.md has the argument), so a row found in neither is
    one the argument does not cover.
    """

    active: set[str] = field(default_factory=set)
    finished: dict[str, float] = field(default_factory=dict)

    def absorb(self, rows: Iterable[Row], active_now: set[str]) -> None:
        """The baseline: remember what the first snapshot shows without counting it."""
        self.active = set(active_now)
        self.finished = {
            str(row["id"]): float(row["enqueued_at"])
            for row in rows
            if str(row["status"]) not in ACTIVE
        }

    def step(self, rows: Sequence[Row], active_now: set[str]) -> Step:
        """Compare one snapshot's window and finished rows with what the previous one showed."""
        out = Step()
        returned: set[str] = set()
        for row in rows:
            task_id = str(row["id"])
            returned.add(task_id)
            if task_id in self.finished:
                continue  # counted when a window first returned it
            if task_id not in self.active:
                out.enqueued.append(row)
            if str(row["status"]) not in ACTIVE:
                out.finished.append(row)
                self.finished[task_id] = float(row["enqueued_at"])
        out.deleted = self.active - active_now - returned
        # A new row is in the window, and rows never go back from terminal to active.
        unseen = active_now - self.active - returned
        out.unexplained = unseen | (active_now & self.finished.keys())
        self.active = set(active_now)
        return out

    def forget(self, bound: float) -> None:
        """Drop the terminal ids that no window from ``bound`` on can return."""
        self.finished = {i: key for i, key in self.finished.items() if key >= bound}


class DjangoTasksReader:
    """Reads django-tasks-db's result table into gauges and exact tallies, one cycle at a time."""

    preset = PRESET

    def __init__(self, clock_margin: float = CLOCK_MARGIN) -> None:
        self.sql = load_queries(PRESET)
        self.clock_margin = clock_margin
        self.tallies = Tallies()
        self.diff = ActiveSetDiff()
        self.counting = False
        self._bound: float | None = None  # this cycle's window starts here
        self._next_bound: float | None = None

    def horizon_query(self) -> Query:
        """The statement to run in autocommit before the cycle's transaction."""
        return Query("horizon", self.sql["horizon"])

    def queries(self, horizon: Row) -> list[Query]:
        """The cycle's statements, in order, for one REPEATABLE READ, READ ONLY transaction."""
        parsed = Horizon.from_row(horizon)
        out = [Query("snapshot", self.sql["snapshot"]), Query("gauges", self.sql["gauges"])]
        if parsed.prepared:
            # pg_stat_activity does not list a prepared transaction, so this horizon does not
            # bound its writes; the last bound taken without one still does.
            if self._bound is None:
                return out
            self._next_bound = self._bound
        else:
            # What this snapshot does not show was enqueued by a transaction that started at
            # or after lower_bound (horizon.py), stamped no earlier than the margin before it.
            self._next_bound = parsed.lower_bound - self.clock_margin
            if self._bound is not None:
                self._next_bound = max(self._next_bound, self._bound)
        if self._bound is None:
            self._bound = self._next_bound  # the baseline absorbs the same window
        args = (self._bound, sorted(self.diff.active))
        out.append(Query("changes", self.sql["changes"], args))
        return out

    def apply(self, results: Results) -> Reading:
        """Fold one cycle's rows into the tallies and return its gauges."""
        snapshot = first(results["snapshot"])
        gauge_rows = results["gauges"]
        reading = Reading(
            taken_at=float(snapshot["now"]),
            gauges=gauges_from(gauge_rows),
            counting=self.counting,
            rows_read={name: len(rows) for name, rows in results.items()},
        )
        if "changes" not in results:
            reading.warnings.append("prepared transactions delay the django-tasks baseline")
            return reading
        if self._next_bound is None:
            raise PresetError("apply() before queries()")
        active_now = {str(i) for row in gauge_rows for i in row["active_ids"]}
        changes = results["changes"]
        if not self.counting:
            self.diff.absorb(changes, active_now)
            self.counting = reading.counting = True
        else:
            step = self.diff.step(changes, active_now)
            if step.unexplained:
                raise PresetError(
                    f"{len(step.unexplained)} active tasks were outside the enqueued_at window: "
                    f"an enqueuing host's clock is more than {self.clock_margin:g} s behind the "
                    "database's, or a finished task was put back by hand; either can hide "
                    "tasks that finished between two cycles"
                )
            self._count(step)
            if step.deleted:
                reading.warnings.append(
                    f"{len(step.deleted)} active tasks were deleted before their end could be "
                    "read (prune_db_task_results with a minimum age of 0, or by hand); "
                    "they are not counted"
                )
        self.diff.forget(self._next_bound)
        self._bound = self._next_bound
        return reading

    def _count(self, step: Step) -> None:
        tallies = self.tallies
        for row in step.enqueued:
            tallies.enqueued[str(row["job_type"])] += 1
        for row in step.finished:
            task = str(row["job_type"])
            status = str(row["status"])
            if status == SUCCESSFUL:
                tallies.completed[task] += 1
                tallies.observe(task, _seconds(row["duration"]), _seconds(row["wait"]),
                                _seconds(row["latency"]))  # fmt: skip
            elif status == FAILED:
                # No retry: the one failed attempt is also the task's death.
                reason = str(row["exception_class_path"] or UNKNOWN_REASON)
                tallies.failures[(task, reason)] += 1
                tallies.dead[(task, reason)] += 1


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None
