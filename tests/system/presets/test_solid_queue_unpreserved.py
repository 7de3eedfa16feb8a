"""Solid Queue 1.5 with ``preserve_finished_jobs`` off (its statements replayed by
tests/system/presets/solid_queue_harness.py, every Rails process deleting a job as it
finishes): the ``solid-queue-unpreserved`` preset's deaths equal the harness's log per class
and reason, every counter it withholds stays off /metrics, and its gauges equal the tables;
``solid-queue`` refuses such a queue rather than count its deleted finishes as nothing.

The workload is test_solid_queue.py's (skewed Rails clocks, a held enqueue, the clean-up, a
dead worker, retries, discards and cancels): what the profile cannot see (enqueues, finishes,
retry_on rows, retries by hand, cancels) still happens, so withholding them is tested where
they occur.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from exporter.vocabulary import LEASE_EXPIRED, SCHEMA
from tests.conftest import execute
from tests.helpers import QUEUE, Samples
from tests.system.presets import solid_queue_harness as h
from tests.system.presets.exported import RecordedPoller, nonzero
from tests.system.presets.solid_queue_client import install
from tests.system.presets.solid_queue_maintenance import RailsProcess

pytestmark = pytest.mark.slow

# The families a scrape must not show for this profile: with finished rows deleted, a job
# enqueued (or retried by hand) and finished between two cycles leaves nothing to count.
WITHHELD = (
    "jobqueue_jobs_enqueued",
    "jobqueue_jobs_completed",
    "jobqueue_job_failures",
    "jobqueue_jobs_requeued",
    "jobqueue_jobs_cancelled",
    "jobqueue_job_latency_seconds",
    "jobqueue_job_duration_seconds",
    "jobqueue_job_wait_seconds",
)


@pytest.fixture
async def solid_queue_dsn(empty_dsn: str) -> str:
    """test_solid_queue.py's database: Solid Queue's schema, sessions defaulting to UTC+14
    (Rails sets UTC on its own sessions, the exporter's keep the database's default)."""
    await install(empty_dsn)
    name = urlsplit(empty_dsn).path.lstrip("/")
    await execute(empty_dsn, f"ALTER DATABASE \"{name}\" SET TimeZone TO 'Pacific/Kiritimati'")
    return empty_dsn


def deaths(samples: Samples) -> dict[tuple[str, str], int]:
    """jobqueue_jobs_dead_total by (job_type, reason) as a scrape showed it, without zeros."""
    out: dict[tuple[str, str], int] = {}
    for (name, labels), found in samples.items():
        label = dict(labels)
        if name == "jobqueue_jobs_dead_total" and label["queue"] == QUEUE and found:
            out[(label["job_type"], label["reason"])] = int(found)
    return out


def withheld_shown(samples: Samples) -> set[str]:
    """The sample names of a scrape that belong to a withheld family."""
    return {name for name, _ in samples if name.startswith(WITHHELD)}


async def test_deaths_and_gauges_equal_the_log_and_the_tables_and_nothing_else_is_exported(
    solid_queue_dsn: str,
) -> None:
    log = h.Log(preserved=False)
    past = await h.history(solid_queue_dsn, log)
    poller = RecordedPoller(solid_queue_dsn, "solid-queue-unpreserved")
    stuck_seen: list[float] = []

    async def while_stuck(n: int) -> None:
        await poller.until(lambda: poller.stuck("SlowJob") == n, within=20)
        stuck_seen.append(poller.stuck("SlowJob"))

    async with poller.running():
        await h.run_workload(solid_queue_dsn, log, past, while_stuck)
        await poller.cycles(3)
    tables = await h.table_states(solid_queue_dsn)
    h.check_agreement(log, tables)  # no finished row, one row per job
    truth = log.truth()

    assert len([e for e in poller.exports if e.counting]) >= 8, "too few cycles to prove much"
    # What happened holds every hard part, the withheld ones too (so neither the deaths nor
    # the withholding are vacuous) ...
    assert truth["enqueued"]["OkJob"] > 50
    assert truth["failures"][("FlakyJob", "error")] >= 5  # retry_on rows
    assert truth["requeued"] == {"CrashJob": 1, "FixedJob": 2}  # retry, retry all
    assert truth["cancelled"] == {"ParkedJob": 1, "OtherJob": 1}  # discarded while waiting
    assert truth["completed"]["DiscardJob"] >= 5  # discard_on: deleted like a success
    assert log.completed_ids
    assert not log.completed_ids & tables.keys()  # deleted as they finished
    dead_classes = {job_type for job_type, _ in truth["dead"]}
    assert {"BadJob", "CrashJob", "SlowJob"} <= dead_classes
    assert truth["dead"][("SlowJob", LEASE_EXPIRED)] == 2  # pruned: ProcessPrunedError
    # ... and the exporter, polling all along, counted every death and exported nothing else.
    assert deaths(poller.last.samples) == truth["dead"]
    counted: dict[str, Any] = poller.tallies.counters()
    assert counted["dead"] == truth["dead"]
    assert counted["failures"] == truth["dead"]  # kept only to balance them; not exported
    for name in ("enqueued", "completed", "requeued", "cancelled"):
        assert counted[name] == {}, name
    assert not poller.tallies.latency
    assert not poller.tallies.duration
    assert not poller.tallies.wait
    assert [withheld_shown(e.samples) for e in poller.exports if withheld_shown(e.samples)] == []
    assert stuck_seen == [2]
    # At rest, every gauge equals the tables: the same as with finished rows kept, since a
    # finished job counts in no gauge.
    last = poller.last.gauges
    got = {job_type: {"pending": g.pending, "running": g.running, "scheduled": g.scheduled,
                      "held": g.held} for job_type, g in last.items()}  # fmt: skip
    assert nonzero(got) == h.gauges_of(tables)
    assert h.gauges_of(tables) == {
        "ParkedJob": {"pending": 1, "running": 0, "scheduled": 1, "held": 0},
        "OtherJob": {"pending": 1, "running": 0, "scheduled": 0, "held": 0},
        "SerialJob": {"pending": 2, "running": 0, "scheduled": 0, "held": 0},
        "CrashJob": {"pending": 0, "running": 0, "scheduled": 0,
                     "held": truth["dead"][("CrashJob", "error")]},
        "BadJob": {"pending": 0, "running": 0, "scheduled": 0,
                   "held": truth["dead"][("BadJob", "error")]},
        "SlowJob": {"pending": 0, "running": 0, "scheduled": 0, "held": 2},
    }  # fmt: skip
    assert 0 < last["OtherJob"].oldest_ready_wait < 600  # read as UTC, not 14 hours off
    assert all(g.stuck == 0 and g.running_oldest == 0 for g in last.values())


async def test_solid_queue_refuses_to_count_a_queue_that_deletes_finished_jobs(
    solid_queue_dsn: str,
) -> None:
    """The preserved profile, pointed at such a queue, sees a job it followed as running
    vanish without a finish or a failure: the collection fails (reason schema), naming the
    profile to use, instead of counting the finish as nothing."""
    poller = RecordedPoller(solid_queue_dsn, "solid-queue", interval=0.2)
    app = await RailsProcess.connect(solid_queue_dsn, preserve=False)
    worker = await RailsProcess.connect(solid_queue_dsn, preserve=False)
    inner = poller.poller
    try:
        await worker.register("Worker")
        async with poller.running():
            await app.enqueue("OkJob")
            [job] = await worker.claim("default", 1)
            await poller.until(lambda: poller.gauge("OkJob", "running") == 1)
            await poller.cycles(2)  # followed as running, whatever cycle first saw its row
            assert await worker.finish(job)
            for _ in range(20):
                if inner.health.errors[SCHEMA]:
                    break
                await inner.wait_for_collections(inner.generation + 1, limit=30)
            poller.exports.clear()  # the refusal is what this test waits for
    finally:
        await worker.close()
        await app.close()
    assert inner.health.errors[SCHEMA] == 1, inner.health.errors
    assert "solid-queue-unpreserved" in str(inner.last_error)
    assert poller.tallies.completed["OkJob"] == 0  # the deleted finish is not a completion
