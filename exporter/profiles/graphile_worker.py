"""The graphile-worker 0.18 preset: gauges from the live table, deaths from a run_at window.

graphile-worker keeps no history: a success DELETEs the job's row, a failure only unlocks it
(``last_error``, ``run_at`` pushed back by exp(attempts) seconds), and a job that used up its
attempts stays, unlocked, until someone deletes it. So the only event a poller can count
exactly is a death; docs/presets.md has the argument, and why nothing else is exported.
"""

from __future__ import annotations

from exporter.counting.cycle import PresetError, Query, Results, Row
from exporter.counting.gauges import Reading, first, gauges_from
from exporter.counting.horizon import Horizon
from exporter.counting.ledger import Ledger
from exporter.counting.terminal import TerminalCursor
from exporter.model import Tallies
from exporter.profiles.base import EXACT_GAUGES, Exactness, RetentionHint, load_queries
from exporter.vocabulary import ERROR

PRESET = "graphile_worker"
# graphile-worker takes over a job locked for longer than this (resetLockedAt): its own
# notion of a lost worker, and the default stuck threshold.
LOCK_TIMEOUT = 4 * 3600.0

CAPABILITIES: dict[str, Exactness] = {
    **EXACT_GAUGES,
    # created_at of the available set is in no index: min() over a large backlog would read
    # every row of it, and the issue does not ask for it.
    "oldest_pending_age": "not exported",
    "held": "exact",  # unlocked with attempts >= max_attempts: graphile's permanent failure
    "dead": "exact",
    # A success deletes the row, so a job added and finished between two reads leaves no
    # trace, and a failure followed by a success within one interval neither.
    "enqueued": "not exported",
    "completed": "not exported",
    "failures": "not exported",
    "failure_reason": "not exported",
    "failure_deadline": "not exported",
    "requeued": "not exported",
    "cancelled": "not exported",  # graphile-worker has no cancellation
    "wait": "not exported",
    "duration": "not exported",
    "latency": "not exported",
}

RETENTION = RetentionHint(
    rows_deleted_on_success=True,
    history_kept="permanently failed jobs until deleted by hand; successes are deleted at once",
    warning=(
        "only deaths are counted: a permanently failed job deleted by hand (remove_job, "
        "complete_jobs, cleanup DELETE_PERMAFAILED_JOBS) within one poll interval of its "
        "death is not counted, nor a job failed by hand (permanently_fail_jobs, "
        "reschedule_jobs), nor one force-unlocked on its last attempt within one poll "
        "interval of its start"
    ),
)


class GraphileWorkerReader:
    """Reads graphile_worker._private_jobs into gauges and an exact count of deaths."""

    preset = PRESET

    def __init__(self, stuck_after: float | None = None, ledger: Ledger | None = None) -> None:
        self.sql = load_queries(PRESET)
        self.stuck_after = stuck_after if stuck_after is not None else LOCK_TIMEOUT
        self.ledger = ledger or Ledger()
        self.cursor = TerminalCursor()
        # The previous cycle's deaths query: dead job id -> task identifier.
        self.window: dict[str, str] = {}
        self.locked: list[int] = []  # the jobs the previous cycle saw locked
        self.counting = False

    @property
    def tallies(self) -> Tallies:
        """What the ledger counted, by job-type label."""
        return self.ledger.tallies

    def horizon_query(self) -> Query:
        """The statement to run in autocommit before the cycle's transaction."""
        return Query("horizon", self.sql["horizon"])

    def queries(self, horizon: Row) -> list[Query]:
        """The cycle's statements, in order, for one REPEATABLE READ, READ ONLY transaction."""
        planned = self.cursor.plan(Horizon.from_row(horizon))
        out = [
            Query("snapshot", self.sql["snapshot"]),
            Query("gauges", self.sql["gauges"], (self.stuck_after,)),
        ]
        if planned is not None:
            out.append(Query("deaths", self.sql["deaths"], (planned[0], self.locked)))
        return out

    def apply(self, results: Results) -> Reading:
        """Count the jobs new to the death window as deaths; return the gauges."""
        snapshot = first(results["snapshot"])
        reading = Reading(
            taken_at=float(snapshot["now"]),
            gauges=gauges_from(results["gauges"]),
            counting=self.counting,
            rows_read={name: len(rows) for name, rows in results.items()},
        )
        locked = {int(i) for row in results["gauges"] for i in row["locked_ids"]}
        if "deaths" not in results:
            # Not looked up this cycle: the next one looks up these as well.
            self.locked = sorted(locked | set(self.locked))
            reading.warnings.append("prepared transactions delay the graphile-worker baseline")
            return reading
        if self.cursor.bound is None:
            raise PresetError("apply() before queries()")
        window = {str(row["id"]): str(row["job_type"]) for row in results["deaths"]}
        if self.counting:
            # The previous window holds every job that was dead then and is still in this one,
            # and a job locked then was not dead: a new id died since (the baseline's window
            # is history and is not counted).
            for job_id, task in window.items():
                if job_id not in self.window:
                    # last_error is free text (and a lock takeover writes none): all are errors.
                    self.ledger.dead(task, ERROR)
        self.window = window
        self.locked = sorted(locked)
        self.counting = reading.counting = True
        self.cursor.advance(str(snapshot["snapshot"]))
        return reading
