"""Every counter, histogram and cost sum equals the fleet's ground truth, exactly.

A simulated fleet drives the real state machine on a real PostgreSQL while the exporter
collects every 100 ms. The workload carries the hazards that break naive polling: commits
seconds after their ``now()``, several transitions of one job between two collections,
reaping, requeues, dedupe skips, malformed results, more job types than the label cap, and
an exporter restart in the middle. It runs on the reference job table, and on a home-grown
table (tests/mapped_queue.py: every column renamed, text states and job types, bigint ids)
that the exporter reads through its table: mapping, driven by the same SQL translated.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from exporter.demo.fleet import Fleet, FleetConfig
from exporter.demo.queue import JobQueue
from exporter.settings import Settings
from tests.helpers import (
    cursor,
    fast_settings,
    make_poller,
    poller_running,
    settle,
    wait_for_completions,
)
from tests.mapped_queue import TasksQueue, prepare_tasks, tasks_queue
from tests.truth import assert_dead_gauge_matches_table, assert_exact

pytestmark = pytest.mark.slow

CAP = 50
BURST_TYPE = 99


@dataclass(frozen=True)
class Table:
    """Which table the fleet drives, and how many job types it enqueues."""

    queue: type[JobQueue]
    # More than CAP on the job table: some fold into "other" while the burst type keeps its
    # configured name. Text job types cannot be named, so the mapped table stays under the
    # cap, and the burst's label is its own text (folding text types: tests/db/test_mapped.py).
    job_types: int


TABLES = [Table(JobQueue, 60), Table(TasksQueue, 40)]


@pytest.mark.parametrize("table", TABLES, ids=["job", "app.tasks"])
async def test_counters_equal_ground_truth_through_hazards_and_a_restart(
    db_dsn: str, table: Table, tmp_path: Path
) -> None:
    # Backoff and run time longer than several collection intervals, so that each failure's
    # message is read before the next attempt overwrites it: reasons are then exact too.
    # The operator requeues dead letters after a second, as a person would (much) later: a job
    # that dies and is requeued and claimed inside one interval loses its death's reason.
    # (Overwritten messages are the documented exception, exercised by the burst below.)
    config = FleetConfig.fast(
        job_types=table.job_types, duration=(0.3, 0.6), backoff_base=1.0, lease_seconds=1.0,
        enqueue_rate=40.0, workers=12, operator_interval=0.5, requeue_after=1.0,
    )  # fmt: skip
    # The burst's job type is named in the config, so it keeps a label of its own past the cap.
    settings = fast_settings(
        db_dsn, interval=0.1, max_job_types=CAP, commit_lag_tolerance=30.0,
        job_types={BURST_TYPE: "burst"},
    )  # fmt: skip
    if table.queue is TasksQueue:
        queue = settings.queues[0]
        mapped = tasks_queue(tmp_path / "tasks.yml", db_dsn)
        await prepare_tasks(db_dsn, mapped.mapping)
        mapped = replace(mapped, name=queue.name, collect=queue.collect)
        settings = replace(settings, queues=(mapped,))
    fleet = Fleet(db_dsn, config, queue=table.queue)
    try:
        await _run_scenario(fleet, settings)
    finally:
        await fleet.stop()


async def _run_scenario(fleet: Fleet, settings: Settings) -> None:
    db_dsn = fleet.dsn
    await fleet.start()
    await wait_for_completions(fleet, 20)  # history before the exporter starts: not counted
    await fleet.pause()

    first = make_poller(settings)
    try:
        async with poller_running(first) as loop_task:
            await first.wait_for_success()
            before = fleet.tally.snapshot()
            fleet.resume()
            late = [
                asyncio.create_task(fleet.commit_late(5.0, job_type=7, action=action))
                for action in ("enqueue", "complete", "fail")
            ]
            await wait_for_completions(fleet, 60)
            # Several transitions of one job between two collections: hold the loop around it.
            loop_task.cancel()
            await asyncio.gather(loop_task, return_exceptions=True)
            assert await first.collect_once()
            await fleet.burst(BURST_TYPE)
            assert await first.collect_once()
        async with poller_running(first):
            await wait_for_completions(fleet, 30)
            await asyncio.gather(*late)
            await fleet.pause()
            await settle(first)
            await assert_dead_gauge_matches_table(first, db_dsn, fleet.queue)
        truth = fleet.tally.since(before)
        assert fleet.errors == 0
        burst_type = fleet.queue.job_type_of(BURST_TYPE)
        burst_label = first.labels.label(burst_type)
        # The burst: error, lease, deadline, lease, then complete, all unseen in between.
        # Total failures are exact; the overwritten messages take the reason of the one that
        # survived (the deadline), the reclaim marker on it counts as one lease expiry.
        burst = Counter(
            {r: n for (lab, r), n in first.tallies.failures.items() if lab == burst_label}
        )
        assert burst == Counter({"deadline": 3, "lease_expired": 1})
        for reason in ("deadline", "lease_expired", "error"):
            first.tallies.failures.pop((burst_label, reason), None)
            truth.failures.pop((burst_type, reason), None)
        assert_exact(first, truth)
        # Every change carried its stamp, the late commits too: none was taken for unstamped.
        assert first.tallies.unstamped == {}
        assert sum(truth.completed.values()) > 50
        assert sum(truth.requeued.values()) > 0
        assert sum(n for (_, r), n in truth.failures.items() if r == "lease_expired") > 0
        assert sum(n for (_, r), n in truth.failures.items() if r == "deadline") > 0
        assert sum(truth.malformed.values()) > 0
        folds = fleet.config.job_types + 1 > CAP
        assert bool(first.labels.folded) is folds, "more job types than the cap fold into other"
        assert len(first.labels.labels) <= CAP + 1
    finally:
        await first.database.close()

    # A restart: the new process counts from its own first collection, nothing twice.
    second = make_poller(settings)
    try:
        async with poller_running(second):
            await second.wait_for_success()
            before = fleet.tally.snapshot()
            fleet.resume()
            await wait_for_completions(fleet, 30)
            await fleet.pause()
            await settle(second)
            await assert_dead_gauge_matches_table(second, db_dsn, fleet.queue)
        truth = fleet.tally.since(before)
        assert sum(truth.completed.values()) > 20
        assert_exact(second, truth)
        assert second.tallies.unstamped == {}
        # Bounded memory: only jobs that can still change, plus the tolerance window.
        assert cursor(second).tracker.tracked < 2000
    finally:
        await second.database.close()
