"""The Solid Queue reader on the membership diff: where a job was and is, in; exact counts out.

Each case is a path through Solid Queue 1.5's tables between two cycles (the statements of
../shared/research/queues-ddl/solid_queue_queries.sql), fed to the reader as the rows its
``changes`` statement returns; no database.
"""

from __future__ import annotations

from typing import Any

import pytest

from exporter.counting.membership import MembershipReader
from exporter.model import CountingError, Query
from exporter.profiles.solid_queue import SolidQueueReader, SolidQueueUnpreservedReader

LOST = "lease_expired"


def row(job_id: int, state: str, job_type: str | None = "Mail", **figures: Any) -> dict[str, Any]:
    """One row of the changes statement."""
    out: dict[str, Any] = dict.fromkeys(
        ("mark", "reason", "executions", "superseded", "latency"), None
    )
    return {**out, "id": job_id, "job_type": job_type, "state": state, **figures}


class Cycles:
    """Drives a reader through cycles whose horizon settles the previous cycle's last id."""

    def __init__(self, reader: MembershipReader) -> None:
        self.reader = reader
        self.t = 1000.0
        self.queries: list[Query] = []

    def run(
        self,
        last_id: int,
        changes: list[dict[str, Any]] = (),  # type: ignore[assignment]
        members: list[dict[str, Any]] = (),  # type: ignore[assignment]
        running: tuple[int, ...] = (),
    ) -> None:
        self.t += 1.0
        horizon = {"lower_bound": self.t, "hidden": 0, "prepared": 0, "last_id": last_id,
                   "read_at": self.t + 0.5, "id_cache": 1}  # fmt: skip
        self.queries = self.reader.queries(horizon)
        results: dict[str, list[Any]] = {
            "snapshot": [{"now": self.t, "snapshot": "10:10:"}],
            "gauges": [{"job_type": "Mail", "pending": 0, "running_ids": list(running)}],
        }
        names = [q.name for q in self.queries]
        if "members" in names:
            results["members"] = list(members)
        if "changes" in names:
            results["changes"] = list(changes)
        self.reader.apply(results)

    def baseline(self, last_id: int, **kwargs: Any) -> None:
        """The first cycle (no settled id yet), then the baseline."""
        self.run(last_id)
        self.run(last_id, **kwargs)
        assert self.reader.counting

    def changes_args(self) -> tuple[Any, ...]:
        [changes] = [q for q in self.queries if q.name == "changes"]
        return changes.args


def counters(reader: MembershipReader) -> dict[str, dict[Any, int]]:
    return {k: v for k, v in reader.tallies.counters().items() if v}


@pytest.fixture
def sq() -> Cycles:
    cycles = Cycles(SolidQueueReader())
    cycles.baseline(10, members=[row(3, "waiting"), row(4, "running"), row(5, "held", mark=7)],
                    running=(4,))  # fmt: skip
    return cycles


def test_the_baseline_counts_nothing_and_follows_every_job_in_a_side_table(sq: Cycles) -> None:
    assert counters(sq.reader) == {}
    sq.run(10, running=(4,))
    # The live jobs by id, the failed one by its failed execution's id.
    assert sq.changes_args() == (10, [3, 4], [7], [5])


def test_a_new_row_is_an_enqueue_unless_a_retry_on_made_it(sq: Cycles) -> None:
    sq.run(12, [row(11, "waiting", executions=0), row(12, "waiting", executions=2)])
    assert counters(sq.reader) == {"enqueued": {"Mail": 1}, "failures": {("Mail", "error"): 1}}


def test_a_finished_row_is_a_completion_unless_a_later_row_carries_the_job_on(sq: Cycles) -> None:
    # 3 ran and finished; 4 hit retry_on: its later row 11 came first, then 4 finished.
    sq.run(11, [row(3, "finished", superseded=False, latency=2.5),
                row(4, "finished", superseded=True, latency=1.0),
                row(11, "waiting", executions=1)])  # fmt: skip
    assert counters(sq.reader) == {"completed": {"Mail": 1}, "failures": {("Mail", "error"): 1}}
    assert sq.reader.tallies.latency["Mail"].count == 1
    assert sq.reader.tallies.latency["Mail"].total == 2.5


def test_a_row_seen_again_above_the_watermark_is_counted_once(sq: Cycles) -> None:
    done = row(11, "finished", executions=0, superseded=False, latency=1.0)
    sq.run(11, [done])
    sq.run(11, [done])  # the watermark has not passed it yet
    assert counters(sq.reader) == {"enqueued": {"Mail": 1}, "completed": {"Mail": 1}}


def test_a_pruned_process_s_job_fails_with_a_lost_lease_and_a_release_counts_nothing(
    sq: Cycles,
) -> None:
    sq.run(10, [row(4, "held", mark=8, reason=LOST)])
    sq.run(11, [row(11, "running", executions=0)], running=(11,))
    sq.run(11, [row(11, "waiting")])  # a graceful stop released it
    assert counters(sq.reader) == {"failures": {("Mail", LOST): 1}, "dead": {("Mail", LOST): 1},
                                   "enqueued": {"Mail": 1}}  # fmt: skip


def test_a_failed_job_retried_by_hand_is_a_requeue_and_its_next_failure_a_new_one(
    sq: Cycles,
) -> None:
    sq.run(10, [row(5, "held", mark=9, reason="error")])  # retried, failed again
    assert sq.changes_args()[2:] == ([7], [5])
    sq.run(10, [row(5, "finished", superseded=False, latency=9.0)])  # retried, done
    assert sq.changes_args()[2:] == ([9], [5])
    assert counters(sq.reader) == {"requeued": {"Mail": 2}, "failures": {("Mail", "error"): 1},
                                   "dead": {("Mail", "error"): 1}, "completed": {"Mail": 1}}  # fmt: skip


def test_a_discarded_waiting_job_is_a_cancel_and_a_discarded_failed_job_is_nothing(
    sq: Cycles,
) -> None:
    sq.run(10, [row(3, "gone", job_type=None), row(5, "gone", job_type=None)], running=(4,))
    assert counters(sq.reader) == {"cancelled": {"Mail": 1}}
    sq.run(10, running=(4,))
    assert sq.changes_args()[1:] == ([4], [], [])  # gone jobs are no longer followed


def test_a_running_job_deleted_without_an_end_means_finished_rows_are_not_kept(
    sq: Cycles,
) -> None:
    with pytest.raises(CountingError, match="solid-queue-unpreserved"):
        sq.run(10, [row(4, "gone", job_type=None)])


def test_unpreserved_counts_the_failed_executions_only() -> None:
    cycles = Cycles(SolidQueueUnpreservedReader())
    cycles.baseline(10, members=[row(3, "waiting"), row(4, "running")], running=(4,))
    cycles.run(12, [row(4, "gone", job_type=None), row(3, "gone", job_type=None),
                    row(11, "held", executions=0, mark=1, reason="error"),
                    row(12, "waiting", executions=3)])  # fmt: skip
    # The failure only balances the death: the unpreserved profile does not export failures.
    assert counters(cycles.reader) == {"dead": {("Mail", "error"): 1},
                                       "failures": {("Mail", "error"): 1}}  # fmt: skip
