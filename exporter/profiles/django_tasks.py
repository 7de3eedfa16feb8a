"""The django-tasks preset: Django's tasks framework on its database backend (django-tasks-db).

django-tasks-db keeps one row per task: READY -> RUNNING -> SUCCESSFUL or FAILED, never back,
with no retry, no cancellation and no lease. A task can be enqueued and finished between two
cycles, and no column is stamped by the database, so the reader counts in two parts (the
argument is in docs/presets.md, "django-tasks"): the rows enqueued since the previous snapshot,
found in a window on ``enqueued_at`` whose lower bound is the previous horizon less a margin
for the enqueuing hosts' clocks; and the tasks the previous snapshot saw active that have
finished since, found by primary key: exporter/counting/window.py.
"""

from __future__ import annotations

from exporter.counting.gauges import Reading, first, reading_of, seconds
from exporter.counting.horizon import Horizon
from exporter.counting.reader import LedgerReader, planned
from exporter.counting.terminal import TerminalCursor
from exporter.counting.window import EnqueueWindow, Step
from exporter.model import CountingError, Query, Results, Row
from exporter.profiles.base import EXACT_GAUGES, Exactness, RetentionHint, preset_queries
from exporter.vocabulary import ERROR

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
    "failure_deadline": "not exported",  # no retry and no timeout of its own: no deadline kill
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


class DjangoTasksReader(LedgerReader):
    """Reads django-tasks-db's result table into gauges and exact counts, one cycle at a time.

    django-tasks-db has no heartbeat or lease: ``stuck_after`` is unused.
    """

    preset = PRESET
    library = "django-tasks"
    clock_margin = CLOCK_MARGIN

    def start(self) -> None:
        """The windows' cursor, with the enqueuing clocks' margin, and the known tasks."""
        self.cursor = TerminalCursor(margin=self.clock_margin)
        self.window = EnqueueWindow(ACTIVE)

    def statements(self) -> dict[str, str]:
        """profiles/sql/django_tasks.sql."""
        return preset_queries(PRESET)

    @property
    def tracked(self) -> int:
        """The tasks active in the previous snapshot, and the finished ones a window can return."""
        return len(self.window.active) + len(self.window.finished)

    @property
    def held(self) -> int:
        """The finished tasks kept until the window's bound passes them."""
        return len(self.window.finished)

    def queries(self, horizon: Row) -> list[Query]:
        """The cycle's statements, in order, for one REPEATABLE READ, READ ONLY transaction."""
        # What this snapshot does not show was enqueued by a transaction that started at or
        # after the horizon, stamped by its client no earlier than the clock margin before it.
        window = self.cursor.plan(Horizon.from_row(horizon))
        out = [Query("snapshot", self.sql["snapshot"]), Query("gauges", self.sql["gauges"])]
        if window is not None:
            bound, _ = window  # every row version is read by key, so no xmin filter is needed
            out.append(Query("changes", self.sql["changes"], (bound, sorted(self.window.active))))
        return out

    def apply(self, results: Results) -> Reading:
        """Count one cycle's rows into the ledger and return its gauges."""
        reading = reading_of(results, self.counting)
        if "changes" not in results:
            return self.delayed(reading)
        (next_bound,) = planned(self.cursor.next_bound)
        active_now = {str(i) for row in results["gauges"] for i in row["active_ids"]}
        changes = results["changes"]
        if not self.counting:
            self.window.absorb(changes, active_now)
            self.counting = reading.counting = True
        else:
            step = self.window.step(changes, active_now)
            if step.unexplained:
                raise CountingError(
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
        self.window.forget(next_bound)
        self.cursor.advance(str(first(results["snapshot"])["snapshot"]))
        return reading

    def _count(self, step: Step) -> None:
        ledger = self.ledger
        for row in step.enqueued:
            ledger.enqueued(str(row["job_type"]))
        for row in step.finished:
            task = str(row["job_type"])
            status = str(row["status"])
            if status == SUCCESSFUL:
                ledger.completed(task, seconds(row["duration"]), seconds(row["wait"]),
                                 seconds(row["latency"]))  # fmt: skip
            elif status == FAILED:
                # No retry: the one failed attempt is also the task's death. The exception's
                # class path is stored, but class names are unbounded label values.
                ledger.failed(task, ERROR)
                ledger.dead(task, ERROR)
