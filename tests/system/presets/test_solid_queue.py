"""Solid Queue 1.5 (its statements replayed, tests/system/presets/solid_queue_harness.py): the
preset's counters equal the harness's log and its gauges the tables, under skewed Rails
clocks, a held enqueue, a clean-up, a dead worker, retries, discards and cancels."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests.conftest import execute
from tests.system.presets import solid_queue_harness as h
from tests.system.presets.exported import RecordedPoller, nonzero
from tests.system.presets.solid_queue_client import install

pytestmark = pytest.mark.slow


@pytest.fixture
async def solid_queue_dsn(empty_dsn: str) -> str:
    """A database with Solid Queue's schema, whose sessions default to a TimeZone far from
    UTC: Rails sets UTC on its own sessions, the exporter's keep the database's default."""
    await install(empty_dsn)
    name = urlsplit(empty_dsn).path.lstrip("/")
    await execute(empty_dsn, f"ALTER DATABASE \"{name}\" SET TimeZone TO 'Pacific/Kiritimati'")
    return empty_dsn


async def test_counters_and_gauges_equal_the_harness_log_and_the_tables(
    solid_queue_dsn: str,
) -> None:
    log = h.Log()
    past = await h.history(solid_queue_dsn, log)
    poller = RecordedPoller(solid_queue_dsn, "solid-queue")
    stuck_seen: list[float] = []

    def stuck() -> float:
        gauges = poller.last.gauges.get("SlowJob")
        return gauges.stuck if gauges is not None else 0

    async def while_stuck(n: int) -> None:
        await poller.until(lambda: stuck() == n, within=20)
        stuck_seen.append(stuck())

    async with poller.running():
        await h.run_workload(solid_queue_dsn, log, past, while_stuck)
        await poller.cycles(3)
    tables = await h.table_states(solid_queue_dsn)
    h.check_agreement(log, tables)
    truth = log.truth()

    assert len([e for e in poller.exports if e.counting]) >= 8, "too few cycles to prove much"
    # The log holds every hard part (so the truth is not vacuous) ...
    assert truth["enqueued"]["OkJob"] > 50
    assert truth["failures"][("FlakyJob", "error")] >= 5  # retry_on rows
    assert truth["failures"][("SlowJob", "lease_expired")] == 2  # pruned: ProcessPrunedError
    assert truth["requeued"] == {"CrashJob": 1, "FixedJob": 2}  # retry, retry all
    assert truth["cancelled"] == {"ParkedJob": 1, "OtherJob": 1}  # discarded while waiting
    assert truth["completed"]["DiscardJob"] >= 5  # discard_on: stored as a success
    assert log.cleared  # finished two days ago by its worker's clock ...
    assert not log.cleared & tables.keys()  # ... and cleared during the run
    # ... and the exporter, polling all along, agrees with it exactly.
    assert poller.tallies.counters() == truth
    latency = poller.tallies.latency
    for name, n in truth["completed"].items():
        ids = [i for i in log.completed_ids if tables[i]["class_name"] == name]
        assert latency[name].count == n == len(ids), name
        total = sum(tables[i]["latency"] for i in ids)
        assert latency[name].total == pytest.approx(total, abs=1e-6), name
    assert not poller.tallies.duration  # not exported: the start is not kept
    assert not poller.tallies.wait
    assert stuck_seen == [2]
    # At rest, every gauge equals the tables: ready, scheduled and blocked are pending.
    last = poller.last.gauges
    got = {job_type: {"pending": g.pending, "running": g.running, "scheduled": g.scheduled,
                      "held": g.held} for job_type, g in last.items()}  # fmt: skip
    assert nonzero(got) == h.gauges_of(tables)
    assert h.gauges_of(tables) == {
        "ParkedJob": {"pending": 1, "running": 0, "scheduled": 1, "held": 0},
        "OtherJob": {"pending": 1, "running": 0, "scheduled": 0, "held": 0},
        "SerialJob": {"pending": 2, "running": 0, "scheduled": 0, "held": 0},
        "CrashJob": {
            "pending": 0,
            "running": 0,
            "scheduled": 0,
            "held": truth["dead"][("CrashJob", "error")] + 0,
        },
        "BadJob": {
            "pending": 0,
            "running": 0,
            "scheduled": 0,
            "held": truth["dead"][("BadJob", "error")],
        },
        "SlowJob": {"pending": 0, "running": 0, "scheduled": 0, "held": 2},
    }
    # Read as UTC although the session's TimeZone is UTC+14: waits are seconds, not 14 hours.
    assert 0 < last["OtherJob"].oldest_ready_wait < 600
    assert all(g.stuck == 0 and g.running_oldest == 0 for g in last.values())


async def test_per_cycle_queries_use_indexes_on_a_million_rows(solid_queue_dsn: str) -> None:
    from tests.system.presets.explain import measure
    from tests.system.presets.solid_queue_explain import SOLID_QUEUE_BATCH, SOLID_QUEUE_HISTORY

    # The schema is installed already (the fixture): measure_solid_queue would install it again.
    result = await measure(solid_queue_dsn, "solid-queue", SOLID_QUEUE_HISTORY,
                           SOLID_QUEUE_BATCH, ("solid_queue_jobs",))  # fmt: skip
    assert result.plans, "no plan was captured"
    assert {"gauges", "changes"} <= result.plans.keys()
    assert result.seq_scans() == [], result.summary()
    assert max(result.rows_read) < 1_000_000 // 50, result.summary()
    print(result.report())
