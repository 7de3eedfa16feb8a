"""procrastinate 3.10: the preset's counters equal the library's own record, exactly."""

from __future__ import annotations

import pytest

from exporter.profiles.base import UNKNOWN_REASON
from tests.system.presets.exported import RecordedPoller, as_counted, nonzero, observed
from tests.system.presets.processes import require

pytestmark = [pytest.mark.slow, pytest.mark.library]


@pytest.fixture
def procrastinate_dsn(empty_dsn: str) -> str:
    """A database with procrastinate's schema, installed by procrastinate itself."""
    require("procrastinate")
    from tests.system.presets.procrastinate_harness import install

    install(empty_dsn)
    return empty_dsn


async def test_counters_and_gauges_equal_procrastinate_ground_truth(procrastinate_dsn: str) -> None:
    from tests.system.presets import procrastinate_tasks as tasks
    from tests.system.presets.procrastinate_harness import PLAN, run_workload

    poller = RecordedPoller(
        procrastinate_dsn, "procrastinate", heartbeat_timeout=tasks.STALLED_AFTER
    )
    stuck_seen: list[float] = []

    async def while_stalled(stalled: int) -> None:
        # The gauge must agree with procrastinate's own stalled-job query while it lasts.
        await poller.until(lambda: _stuck(poller) == stalled, within=10)
        stuck_seen.append(_stuck(poller))

    async with poller.running():
        truth = await run_workload(procrastinate_dsn, while_stalled)
        await poller.cycles(3)

    counting = [e for e in poller.exports if e.counting]
    assert len(counting) >= 6, "the exporter must collect many times during the workload"
    # The library's record matches what the workload did (so the truth is not vacuous) ...
    assert truth.counters["enqueued"] == {
        "ok": PLAN["ok"] + PLAN["cancel"], "flaky": 5, "bad": 3, "slow": 1, "later": 2, "parked": 3,
    }  # fmt: skip
    assert truth.counters["dead"] == {("bad", UNKNOWN_REASON): 3}
    assert truth.stalled_jobs_found == 1
    # ... and the exporter, polling all along, agrees with it exactly, counter by counter.
    assert poller.tallies.counters() == as_counted(truth.counters)
    assert observed(poller.tallies.duration) == truth.histogram_counts
    assert observed(poller.tallies.wait) == truth.histogram_counts
    assert observed(poller.tallies.latency) == truth.histogram_counts
    # The delayed jobs waited for their run time, not for a worker: wait is short, latency long.
    assert poller.tallies.latency["later"].total >= 2 * 3.0
    assert poller.tallies.wait["later"].total < poller.tallies.latency["later"].total
    assert stuck_seen == [1]
    last = poller.last.gauges
    assert nonzero({t: {"pending": g.pending, "running": g.running, "scheduled": g.scheduled}
                    for t, g in last.items()}) == nonzero(truth.gauges)  # fmt: skip
    assert last["parked"].oldest_pending_age > 0
    assert last["parked"].oldest_ready_wait > 0
    assert all(g.stuck == 0 for g in last.values())


def _stuck(poller: RecordedPoller) -> float:
    gauges = poller.last.gauges.get("slow")
    return gauges.stuck if gauges is not None else 0
