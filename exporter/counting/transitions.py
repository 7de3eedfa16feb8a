"""The transition cursor: the counting mode of a table that keeps only each job's current row.

Each cycle reads the queue's gauges, then the rows changed past the change cursor
(:mod:`exporter.counting.change_cursor`) in chunks until the cursor reaches the horizon's bound or
the runner's read budget is spent; the tracker (:mod:`exporter.counting.tracker`) turns them
into exact transitions, counted straight into the queue's Tallies. The first cycle is the
baseline: the active rows are remembered and nothing is counted. The argument is in
docs/exactness.md. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.counting.change_cursor import ChangeCursor
from exporter.counting.horizon import Horizon
from exporter.counting.snapshot import DeadLetter, active_counts, gauges
from exporter.counting.statuses import stats_notices, unmapped_notices
from exporter.counting.tracker import Tracker, TrackerOptions
from exporter.counting.unstamped import unstamped_notice
from exporter.model import (
    Collected,
    Cycle,
    Figures,
    JobRow,
    JobTypeLabels,
    Notice,
    Query,
    Row,
    Tallies,
)
from exporter.vocabulary import Status

# Purged active rows are looked for every this many cycles (a primary-key lookup per job).
PURGE_CHECK_EVERY = 20

HIDDEN_WARNING = (
    "other sessions are hidden in pg_stat_activity: late commits are counted only within "
    "collect.commit_lag_tolerance; grant pg_read_all_stats to remove the limit"
)


@dataclass(frozen=True)
class CursorOptions:
    """What the transition cursor needs of a queue's settings."""

    tracker: TrackerOptions
    max_rows: int = 10_000
    stuck_threshold: float = 600.0
    done_count: bool = False
    stamp: str = "job.updated_at"  # the table's updated_at column, for the unstamped notice


@dataclass
class TransitionCursor:
    """Counts the transitions of a current-state table exactly, one cycle at a time."""

    sql: Mapping[str, str]
    options: CursorOptions
    labels: JobTypeLabels
    tallies: Tallies
    tracker: Tracker = field(init=False)
    feed: ChangeCursor = field(init=False)
    _cycle: int = 0
    dead_letter: DeadLetter = field(default_factory=DeadLetter)
    # What the status column's statistics held at the last recount, and the unmapped values
    # they have named so far (bounded: statuses.MAX_NAMED).
    _stats_values: list[str] = field(default_factory=list)
    _stats_named: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.tracker = Tracker(self.options.tracker, self.labels, self.tallies)
        self.feed = self._new_feed()

    def _new_feed(self) -> ChangeCursor:
        return ChangeCursor(
            tolerance=self.options.tracker.commit_lag_tolerance, max_rows=self.options.max_rows
        )

    @property
    def tracked(self) -> int:
        """How many jobs' last state the tracker keeps."""
        return self.tracker.tracked

    @property
    def held(self) -> int:
        """Finished jobs kept until the cursor passes them (grows while the horizon is held)."""
        return self.tracker.held

    @property
    def stream(self) -> None:
        """Polling: nothing is fed from a change stream."""
        return None

    def horizon_query(self) -> Query:
        """The statement to run in autocommit, before the cycle's snapshot."""
        return Query("horizon", self.sql["horizon"])

    def cycle(self, horizon: Row) -> Cycle:
        """One cycle: gauges, then the baseline's active rows or the changes past the cursor."""
        self._cycle += 1
        tracker, options = self.tracker, self.options
        unstamped_before = sum(self.tallies.unstamped.values())  # said once per queue
        baseline = not tracker.started
        if baseline and self.feed.started:
            self.feed = self._new_feed()  # an earlier baseline failed after planning the cursor
        recount_dead = baseline or self.dead_letter.due(self._cycle)
        check_ids = None
        if not baseline:
            tracker.begin()
            if self._cycle % PURGE_CHECK_EVERY == 0:
                check_ids = tracker.active_ids_not_in_window() or None
        feed = self.feed
        feed.plan(Horizon.of_timestamps(horizon))
        rows_before = feed.rows_read
        snapshot_rows = (
            yield Query("snapshot", self.sql["snapshot"], (options.stuck_threshold,))
        ) or ()
        now = float(snapshot_rows[0]["now"])
        dead_rows = (yield Query("dead", self.sql["dead"])) if recount_dead else None
        statuses = options.tracker.statuses
        notices: list[Notice] = []
        if recount_dead and statuses is not None:
            # With the dead letter: a status typo leaves it at zero, so it is proven as often.
            stats = (yield Query("status_values", self.sql["status_values"])) or ()
            self._stats_values = [r["value"] for r in stats if r["value"] is not None]
            notices += stats_notices(statuses, self._stats_values, self._stats_named)
        done_rows = (yield Query("done", self.sql["done"])) if options.done_count else None
        active: list[JobRow] = []
        dead_ids: list[str] = []
        if baseline:
            active = [_with_result(r) for r in (yield Query("active", self.sql["active"])) or ()]
            # In the same snapshot: an unknown row is later a requeue only if it was dead here.
            dead_ids = [r["job_id"] for r in (yield Query("dead_ids", self.sql["dead_ids"])) or ()]
        else:
            paths = options.tracker.paths.query_args()
            read_all = True
            while (bounds := feed.chunk()) is not None:
                query = Query("changes_after", self.sql["changes_after"], (*bounds, *paths), True)
                rows = yield query
                if rows is None:
                    read_all = False
                    break  # the read budget is spent: the next cycle goes on from here
                tracker.feed([_changed_row(r) for r in rows])
                if not feed.took([(r["updated_key"], r["job_id"]) for r in rows]):
                    break
        if check_ids:
            found = (yield Query("existing", self.sql["existing"], (check_ids,))) or ()
            existing = {r["job_id"] for r in found}
            # Rows read this cycle exist; anything else missing from the answer was purged.
            tracker.forget([i for i in check_ids if i not in existing])
        if baseline:
            origin = feed.origin.timestamp() if feed.origin is not None else None
            tracker.baseline(now, active, [], origin=origin, dead_ids=dead_ids)
        else:
            floor = feed.floor()
            if read_all and feed.caught_up and floor is not None:
                # Every visible change is read now: the tracker's active jobs are the table's,
                # unless a row changed (or went) without a stamp the reads can see.
                suspects = tracker.suspects(active_counts(snapshot_rows), floor, options.max_rows)
                if suspects:
                    found = (yield Query("recheck", self.sql["recheck"], (suspects,))) or ()
                    tracker.settle_unread(suspects, [_job_row(r) for r in found], floor)
            tracker.finish(now, floor=floor)
        dead = self.dead_letter.update(self._cycle, dead_rows, tracker.dead_delta)
        snapshot = gauges(now, snapshot_rows, dead, done_rows, self.labels)
        notices += unmapped_notices(statuses, tracker.unmapped_new, self._stats_values)
        if tracker.unstamped_first is not None:
            if not unstamped_before:
                notices.append(unstamped_notice(tracker.unstamped_first, options.stamp))
            tracker.unstamped_first = None
        hidden = feed.horizon is not None and feed.horizon.hidden > 0
        return Collected(
            snapshot=snapshot,
            counting=True,  # from the baseline on
            rows_read=feed.rows_read - rows_before,
            lag=feed.lag(),
            behind=not feed.caught_up,
            warnings=(HIDDEN_WARNING,) if hidden else (),
            notices=tuple(notices),
        )


def _job_row(
    r: Row,
    *,
    result: str | None = None,
    figures: Figures | None = None,
    run_seconds: float | None = None,
) -> JobRow:
    return JobRow(
        job_id=r["job_id"],
        job_type=r["job_type"],
        status=r["status"],
        attempts=r["attempts"],
        max_attempts=r["max_attempts"],
        last_error=r["last_error"],
        result=result,
        run_after=r["run_after"],
        run_started_at=r["run_started_at"],
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        wait_seconds=r["wait_seconds"],
        latency_seconds=r["latency_seconds"],
        figures=figures,
        run_seconds=run_seconds,
        status_text=r.get("status_text"),
    )


def _with_result(r: Row) -> JobRow:
    """A row of ``active``: the whole ``result`` document, as text."""
    return _job_row(r, result=r["result"])


def _changed_row(r: Row) -> JobRow:
    """A row of ``changes_after``: the values at ``result``'s paths come pulled out in SQL."""
    if r["status"] != Status.DONE:
        return _job_row(r)
    figures = Figures(
        r["result_kind"], r["duration_ms"], r["ai_usd"], r["proxy_usd"], r["total_usd"]
    )
    return _job_row(r, figures=figures, run_seconds=r["run_seconds"])
