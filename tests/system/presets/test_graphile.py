"""graphile-worker 0.18: the preset's gauges and its one counter, deaths, equal the truth."""

from __future__ import annotations

import asyncpg
import pytest

from exporter.poller import Poller
from exporter.profiles.graphile_worker import GraphileWorkerReader
from exporter.vocabulary import ERROR
from tests.system.presets.exported import Export, RecordedPoller, nonzero
from tests.system.presets.processes import require

pytestmark = [pytest.mark.slow, pytest.mark.library]
# Locked for longer than this counts as stuck here; graphile's own takeover is after 4 h.
STUCK_AFTER = 1.0
OLD = 4.0  # seconds: far more than a window's reach back (one poll interval plus 1 s)


@pytest.fixture
def graphile_dsn(empty_dsn: str) -> str:
    """A database with graphile-worker's schema (installed by its own CLI) and some history."""
    require("graphile-worker")
    from tests.system.presets.graphile_harness import history, install

    install(empty_dsn)
    history(empty_dsn)
    return empty_dsn


async def test_deaths_and_gauges_equal_graphile_ground_truth(graphile_dsn: str) -> None:
    from tests.system.presets.graphile_harness import run_workload

    poller = RecordedPoller(
        graphile_dsn, "graphile-worker", heartbeat_timeout=STUCK_AFTER, probe=_recounted
    )
    stuck_seen: list[float] = []

    async def before_kill(running: int) -> None:
        await poller.until(lambda: _gauge(poller, "slow", "stuck") == running, within=15)
        stuck_seen.append(_gauge(poller, "slow", "stuck"))
        # Old enough that its run_at lies below any death window by the force-unlock: only
        # the lookup of the jobs seen locked can find that death.
        await poller.until(lambda: _oldest(poller, "slow") >= OLD, within=15)

    async with poller.running():
        truth = await run_workload(graphile_dsn, before_kill)
        await poller.cycles(3)
    # Between recounts the dead gauge followed the deaths: some cycle without a recount moved it.
    exports = poller.exports
    recounts = [i for i, e in enumerate(exports) if e.probed]
    assert len(recounts) >= 2, "the workload spans a recount after the baseline"
    moved = [i for i in range(1, len(exports))
             if i not in recounts and _held(exports[i]) != _held(exports[i - 1])]  # fmt: skip
    assert moved, "no cycle between recounts followed a death"

    counting = [e for e in exports if e.counting]
    assert len(counting) >= 6, "the exporter must collect many times during the workload"
    # The library's rows agree with what the handlers did, so the truth is not vacuous: the
    # two history deaths are not in it, the workload's are: five bad jobs (three after a
    # retry), the slow job whose last attempt's worker was killed and taken over, and the one
    # force-unlocked by hand on its last attempt.
    assert truth.dead_by_rows == truth.dead_by_handlers == {"bad": 5, "slow": 2}
    assert truth.outcomes[("slow", "started-long")] == 3
    assert truth.outcomes[("slow", "completed")] == 1
    assert truth.outcomes[("bad", "failed")] == 2 + 3 * 2 + 2
    assert truth.outcomes[("flaky", "failed")] == 5
    assert truth.outcomes[("flaky", "completed")] == 5
    assert truth.outcomes[("ok", "completed")] == 3 + 20
    # The exporter, polling all along, counted exactly the deaths since its baseline.
    expected = {(task, ERROR): n for task, n in truth.dead_by_rows.items()}
    assert poller.tallies.counters() == {
        "enqueued": {}, "completed": {}, "failures": {}, "dead": expected, "requeued": {},
        "cancelled": {},
    }  # fmt: skip
    assert stuck_seen == [2, 1]
    # At rest (both workers stopped), every gauge equals the table.
    last = poller.last.gauges
    got = {
        task: {"pending": g.pending, "scheduled": g.scheduled, "running": g.running,
               "held": g.held}
        for task, g in last.items()
    }  # fmt: skip
    assert nonzero(got) == nonzero(truth.gauges)
    assert got["parked"] == {"pending": 2, "scheduled": 2, "running": 0, "held": 0}
    assert got["bad"]["held"] == 2 + 5
    assert got["slow"] == {"pending": 0, "scheduled": 0, "running": 0, "held": 2}
    assert all(g.stuck == 0 for g in last.values())
    assert all(g.oldest_ready_wait == 0 for g in last.values())

    # An old dead job (a history death, below every window, not followed) deleted by hand is
    # invisible between recounts; the next recount takes it off the gauge.
    conn = await asyncpg.connect(graphile_dsn)
    try:
        rows = await conn.fetch(
            "SELECT j.id FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t"
            " ON t.id = j.task_id WHERE t.identifier = 'bad' AND j.attempts >= j.max_attempts "
            "ORDER BY j.id"
        )
        known = poller.reader(GraphileWorkerReader).known
        old = next(r["id"] for r in rows if str(r["id"]) not in known)
        await conn.execute("SELECT graphile_worker.complete_jobs(ARRAY[$1::bigint])", old)
    finally:
        await conn.close()
    async with poller.running():
        await poller.cycles(1)
        if not poller.last.probed:
            assert poller.last.gauges["bad"].held == 2 + 5  # not seen yet
        await poller.until(lambda: poller.last.probed, within=20)
    assert poller.last.gauges["bad"].held == 2 + 5 - 1


def _recounted(poller: Poller) -> bool:
    """Whether the collection just finished recounted the dead jobs (rather than followed them)."""
    mode = poller.mode
    assert isinstance(mode, GraphileWorkerReader)
    return mode.since_recount == 0


def _held(export: Export) -> dict[str, float]:
    return {task: g.held for task, g in export.gauges.items() if g.held}


def _oldest(poller: RecordedPoller, task: str) -> float:
    gauges = poller.last.gauges.get(task)
    return gauges.running_oldest if gauges is not None else 0.0


def _gauge(poller: RecordedPoller, task: str, name: str) -> int:
    gauges = poller.last.gauges.get(task)
    return int(getattr(gauges, name)) if gauges is not None else 0
