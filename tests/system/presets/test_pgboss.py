"""pg-boss 12.38: the preset's counters equal the library's own record, exactly."""

from __future__ import annotations

import pytest

from exporter.profiles.base import UNKNOWN_REASON
from tests.system.presets.exported import RecordedPoller, as_counted, nonzero, observed
from tests.system.presets.processes import require

pytestmark = [pytest.mark.slow, pytest.mark.library]


@pytest.fixture
def pgboss_dsn(empty_dsn: str) -> str:
    """A database with pg-boss's schema, installed by pg-boss's own CLI."""
    require("pg-boss")
    from tests.system.presets.pgboss_harness import install

    install(empty_dsn)
    return empty_dsn


async def test_counters_and_gauges_equal_pgboss_ground_truth(pgboss_dsn: str) -> None:
    from tests.system.presets.pgboss_harness import run_workload

    poller = RecordedPoller(pgboss_dsn, "pgboss")
    stuck_seen: list[float] = []

    async def while_stuck(stuck: int) -> None:
        await poller.until(lambda: _stuck(poller) == stuck, within=10)
        stuck_seen.append(_stuck(poller))

    async with poller.running():
        truth = await run_workload(pgboss_dsn, while_stuck)
        await poller.cycles(3)

    counting = [e for e in poller.exports if e.counting]
    assert len(counting) >= 6, "the exporter must collect many times during the workload"
    # The tables agree with what the handlers did (so the truth is not vacuous): every failed
    # attempt is a handler that threw, or the one the SIGKILL cut short and pg-boss expired.
    outcomes = truth.handler_outcomes
    assert truth.counters["enqueued"] == {
        "ok": 20, "flaky": 5, "bad": 3, "bad_dlq": 3, "slow": 1, "later": 2, "parked": 4,
    }  # fmt: skip
    for queue in ("ok", "flaky", "bad", "later"):
        assert (
            truth.counters["failures"].get((queue, UNKNOWN_REASON), 0)
            == outcomes[(queue, "failed")]
        )
        assert truth.counters["completed"].get(queue, 0) == outcomes[(queue, "completed")]
    assert outcomes[("slow", "started-long")] == 1
    assert truth.counters["failures"][("slow", UNKNOWN_REASON)] == 1  # the expired attempt
    assert truth.counters["dead"] == {("bad", UNKNOWN_REASON): 3}
    assert truth.counters["cancelled"] == {"parked": 1}
    # ... and the exporter, polling all along, agrees with the tables exactly.
    assert poller.tallies.counters() == as_counted(truth.counters)
    assert observed(poller.tallies.duration) == truth.histogram_counts
    assert observed(poller.tallies.wait) == truth.histogram_counts
    assert observed(poller.tallies.latency) == truth.histogram_counts
    assert poller.tallies.latency["later"].total >= 2 * 3.0
    assert poller.tallies.wait["later"].total < poller.tallies.latency["later"].total
    assert stuck_seen == [1]
    last = poller.last.gauges
    got = {q: {"pending": g.pending, "running": g.running, "scheduled": g.scheduled}
           for q, g in last.items()}  # fmt: skip
    assert nonzero(got) == nonzero(truth.gauges)
    assert last["parked"].oldest_pending_age > 0
    assert all(g.stuck == 0 for g in last.values())


def _stuck(poller: RecordedPoller) -> float:
    gauges = poller.last.gauges.get("slow")
    return gauges.stuck if gauges is not None else 0
