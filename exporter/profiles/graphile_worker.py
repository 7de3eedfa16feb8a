"""The graphile-worker 0.18 preset: gauges from the live table, deaths from a run_at window.

graphile-worker keeps no history: a success DELETEs the job's row, a failure only unlocks it
(``last_error``, ``run_at`` pushed back by exp(attempts) seconds), and a job that used up its
attempts stays, unlocked, until someone deletes it. So the only event a poller can count
exactly is a death; docs/presets.md has the argument, and why nothing else is exported.
"""

from __future__ import annotations

from dataclasses import replace

from exporter.counting.gauges import Gauges, Reading, first, reading_of
from exporter.counting.horizon import Horizon
from exporter.counting.reader import LedgerReader, planned
from exporter.counting.snapshot import DEAD_RECOUNT_EVERY
from exporter.counting.terminal import TerminalCursor
from exporter.model import Query, Results, Row
from exporter.profiles.base import (
    EXACT_GAUGES,
    Exactness,
    PresetLogical,
    RetentionHint,
    preset_queries,
)
from exporter.profiles.graphile_stream import GraphileChanges
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
    # Unlocked with attempts >= max_attempts: graphile's permanent failure, kept until deleted.
    # Counted every DEAD_RECOUNT_EVERY cycles (O(dead rows)); in between the recount plus the
    # deaths seen, minus the dead jobs followed by id that are gone or revived.
    "held": "exact at recounts",
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

# collect.counting: logical (docs/logical.md): every change of _private_jobs arrives with its
# whole old row, so what a DELETE erases under polling is counted from the stream
# (exporter/profiles/graphile_stream.py has the rules); the gauges stay the reader's.
LOGICAL_CAPABILITIES: dict[str, Exactness] = {
    **CAPABILITIES,
    "enqueued": "exact",
    "completed": "exact",
    "failures": "exact",
    # A failed attempt (last_error written) is an error, a lost worker's lock freed by
    # resetLockedAt or force_unlock_workers is lease_expired. last_error is free text: no
    # deadline kill can be told apart.
    "failure_reason": "exact",
    "dead": "exact",
    # reschedule_jobs of a dead job; graphile-worker has no other requeue.
    "requeued": "exact",
    # duration and latency end at the DELETE's commit (the row keeps no completion time),
    # which follows the task's end by the completeJobs round trip (or completeJobBatchDelay).
    "wait": "exact",
    "duration": "exact",
    "latency": "exact",
}


def _changes() -> GraphileChanges:
    return GraphileChanges(preset_queries(PRESET)["tasks"])


LOGICAL = PresetLogical(LOGICAL_CAPABILITIES, _changes, fills=frozenset({"vanished"}))

RETENTION = RetentionHint(
    rows_deleted_on_success=True,
    history_kept="permanently failed jobs until deleted by hand; successes are deleted at once",
    warning=(
        "under polling only deaths are counted (collect.counting: logical counts every "
        "transition from the change stream): a permanently failed job deleted by hand (remove_job, "
        "complete_jobs, cleanup DELETE_PERMAFAILED_JOBS) within one poll interval of its "
        "death is not counted, nor a job failed by hand (permanently_fail_jobs, "
        "reschedule_jobs), nor one force-unlocked on its last attempt within one poll "
        "interval of its start"
    ),
)


class GraphileWorkerReader(LedgerReader):
    """Reads graphile_worker._private_jobs into gauges and an exact count of deaths."""

    preset = PRESET
    library = "graphile-worker"
    default_stuck_after = LOCK_TIMEOUT

    def start(self) -> None:
        """The death window's cursor and what the reader follows."""
        self.cursor = TerminalCursor()
        # The dead jobs the reader follows, id -> task identifier: the previous cycle's death
        # window, and every death seen since the last recount (each looked up by id).
        self.known: dict[str, str] = {}
        self.locked: list[int] = []  # the jobs the previous cycle saw locked
        # The dead gauge per task: the last recount plus the deaths and departures seen since.
        self.dead: dict[str, int] = {}
        self.since_recount = 0  # counting cycles since the last recount

    def statements(self) -> dict[str, str]:
        """profiles/sql/graphile_worker.sql."""
        return preset_queries(PRESET)

    @property
    def tracked(self) -> int:
        """The dead jobs followed by id, and the jobs the previous cycle saw locked."""
        return len(self.known) + len(self.locked)

    @property
    def held(self) -> int:
        """The dead jobs followed by id until the next recount."""
        return len(self.known)

    @property
    def recount_due(self) -> bool:
        """Whether the next cycle that reads the death window recounts the dead set."""
        return not self.counting or self.since_recount >= DEAD_RECOUNT_EVERY

    def queries(self, horizon: Row) -> list[Query]:
        """The cycle's statements, in order, for one REPEATABLE READ, READ ONLY transaction."""
        window = self.cursor.plan(Horizon.from_row(horizon))
        out = [
            Query("snapshot", self.sql["snapshot"]),
            Query("gauges", self.sql["gauges"], (self.stuck_after,)),
        ]
        # Once counting, the window is read every cycle (window is None only before the
        # baseline), so a recount shares its snapshot: what the window finds next came after.
        if self.recount_due:
            out.append(Query("dead", self.sql["dead"]))
        if window is not None:
            ids = sorted({int(i) for i in self.known} | set(self.locked))
            out.append(Query("deaths", self.sql["deaths"], (window[0], ids)))
        return out

    def apply(self, results: Results) -> Reading:
        """Count the jobs new to the death window as deaths; return the gauges."""
        reading = reading_of(results, self.counting)
        locked = {int(i) for row in results["gauges"] for i in row["locked_ids"]}
        if "dead" in results:
            self.dead = {str(row["job_type"]): int(row["held"]) for row in results["dead"]}
            self.since_recount = 0
        if "deaths" not in results:
            # Not looked up this cycle: the next one looks up these as well.
            self.locked = sorted(locked | set(self.locked))
            return self._with_dead(self.delayed(reading))
        planned(self.cursor.bound)
        found = {str(row["id"]): str(row["job_type"]) for row in results["deaths"]}
        if self.counting:
            # Everything followed was dead in the previous snapshot, and a job locked then was
            # not dead: a new id died since (the baseline's window is history and is not
            # counted). A followed id not returned is no longer dead: deleted or revived.
            for job_id, task in found.items():
                if job_id not in self.known:
                    # last_error is free text (and a lock takeover writes none): all are errors.
                    self.ledger.dead(task, ERROR)
                    if "dead" not in results:
                        self.dead[task] = self.dead.get(task, 0) + 1
            if "dead" not in results:
                for job_id, task in self.known.items():
                    if job_id not in found:
                        self.dead[task] = max(0, self.dead.get(task, 0) - 1)
        if "dead" in results:
            # The recount has every dead job: follow only the window's again (an id below it
            # cannot come back into it but by a revival, see docs/presets.md).
            found = {
                str(row["id"]): str(row["job_type"]) for row in results["deaths"]
                if row["in_window"]
            }  # fmt: skip
        else:
            self.since_recount += 1
        self.known = found
        self.locked = sorted(locked)
        self.counting = reading.counting = True
        self.cursor.advance(str(first(results["snapshot"])["snapshot"]))
        return self._with_dead(reading)

    def _with_dead(self, reading: Reading) -> Reading:
        """The reading with the dead gauge filled in from the reader's count."""
        gauges = reading.gauges
        for task in {*gauges, *self.dead}:
            gauges[task] = replace(gauges.get(task, Gauges()), held=self.dead.get(task, 0))
        return reading
