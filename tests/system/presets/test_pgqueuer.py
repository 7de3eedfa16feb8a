"""pgqueuer 1.6: the preset's counters equal the library's own record, exactly."""

from __future__ import annotations

import pytest

from exporter.profiles.pgqueuer import HEARTBEAT_REASON
from tests.system.presets.exported import RecordedPoller, as_counted, nonzero, observed
from tests.system.presets.processes import require

pytestmark = [pytest.mark.slow, pytest.mark.library]


@pytest.fixture
def pgqueuer_dsn(empty_dsn: str) -> str:
    """A database with pgqueuer's schema, installed by pgqueuer itself."""
    require("pgqueuer")
    from tests.system.presets.pgqueuer_harness import install

    install(empty_dsn)
    return empty_dsn


async def test_counters_and_gauges_equal_pgqueuer_ground_truth(pgqueuer_dsn: str) -> None:
    from tests.system.presets.pgqueuer_harness import PLAN, run_workload
    from tests.system.presets.pgqueuer_worker import HEARTBEAT_TIMEOUT, PARKED

    poller = RecordedPoller(pgqueuer_dsn, "pgqueuer", heartbeat_timeout=HEARTBEAT_TIMEOUT)
    stuck_seen: list[float] = []

    async def while_stale(stale: int) -> None:
        await poller.until(lambda: _stuck(poller) == stale, within=10)
        stuck_seen.append(_stuck(poller))

    async with poller.running():
        truth = await run_workload(pgqueuer_dsn, while_stale)
        await poller.cycles(3)

    counting = [e for e in poller.exports if e.counting]
    assert len(counting) >= 6, "the exporter must collect many times during the workload"
    # The library's record matches the workload (so the truth is not vacuous) ...
    assert truth.counters["enqueued"] == {
        "ok": 20, "flaky": 5, "bad": 3, "held": 2, "slow": 1, "later": 2, PARKED: 3 + PLAN["cancel"],
    }  # fmt: skip
    assert truth.counters["dead"] == {("bad", "ValueError"): 3, ("held", "KeyError"): 2}
    assert truth.counters["failures"][("slow", HEARTBEAT_REASON)] == 1
    # ... pgqueuer's own statistics table agrees with its log ...
    for (entrypoint, status), n in truth.log.items():
        assert truth.statistics.get((entrypoint, status)) == n, (entrypoint, status)
    # ... and the exporter, polling all along, agrees with the log exactly.
    assert poller.tallies.counters() == as_counted(truth.counters)
    assert observed(poller.tallies.duration) == truth.histogram_counts
    assert observed(poller.tallies.latency) == truth.histogram_counts
    assert poller.tallies.wait == {}  # not exported: pgqueuer does not keep execute_after
    assert poller.tallies.latency["later"].total >= 2 * 3.0
    assert stuck_seen == [1]
    last = poller.last.gauges
    got = {t: {"pending": g.pending, "running": g.running, "scheduled": g.scheduled, "held": g.held}
           for t, g in last.items()}  # fmt: skip
    assert nonzero(got) == nonzero(truth.gauges)
    assert last[PARKED].oldest_pending_age > 0
    assert all(g.stuck == 0 for g in last.values())


def _stuck(poller: RecordedPoller) -> float:
    gauges = poller.last.gauges.get("slow")
    return gauges.stuck if gauges is not None else 0
