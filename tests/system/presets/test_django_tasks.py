"""django-tasks 0.12 + django-tasks-db 0.13 on Django 5.2: the counters equal the result table.

The real project, `migrate`, the real `db_worker`; the exporter's poller collects on its own
(every figure it counts, and the gauges after every collection) while the exporter service
collects the same database and serves /metrics (task paths as job_type, reasons folded).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

import pytest

from exporter.counting.reader import LedgerReader
from exporter.service import Service
from exporter.settings import Settings, WebSettings
from exporter.vocabulary import ERROR
from tests.helpers import fast_queue, get, parse, wait_until
from tests.system.presets.exported import RecordedPoller, as_counted, nonzero, observed
from tests.system.presets.processes import require
from tests.system.presets.test_exporter import Samples, counters_of, counters_wanted

pytestmark = [pytest.mark.slow, pytest.mark.library]
QUEUE = "django"


@pytest.fixture
async def django_dsn(empty_dsn: str) -> str:
    """A database migrated by the throwaway Django project, with the preset's indexes."""
    require("django_tasks_db")
    from tests.system.presets.django_harness import create_indexes, install

    install(empty_dsn)
    await create_indexes(empty_dsn)
    return empty_dsn


async def test_counters_and_gauges_equal_django_tasks_ground_truth(
    django_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.system.presets.django_harness import ground_truth, history, path, run_workload

    before = await history(django_dsn)  # finished and waiting tasks the exporter never saw
    poller = RecordedPoller(django_dsn, "django-tasks")
    queue = replace(fast_queue(django_dsn, name=QUEUE, interval=0.3), profile="django-tasks")
    service = Service(Settings(queues=(queue,), web=WebSettings(listen_address=("127.0.0.1:0",))))
    await service.start()
    try:
        exporter = service.queue(QUEUE).poller
        mode = exporter.mode
        assert isinstance(mode, LedgerReader), "profile: selects the preset's counting mode"
        await wait_until(lambda: mode.counting, within=60, what="the exporter counting")
        async with poller.running():
            caplog.set_level(logging.WARNING, logger="exporter.poller")
            await run_workload(django_dsn)
            await poller.cycles(3)
        truth = await ground_truth(django_dsn, before)
        wanted = counters_wanted(truth.counters)
        samples: Samples = {}
        deadline = time.monotonic() + 60
        # The exporter collects on its own clock: wait until a scrape shows the quiet table.
        while (got := _counters(samples)) != wanted:
            assert time.monotonic() < deadline, f"counters on /metrics {got} != truth {wanted}"
            await exporter.wait_for_collections(exporter.generation + 1, limit=30)
            status, body, _ = await get(service.port, "/metrics")
            assert status == 200
            samples = parse(body)
    finally:
        await service.stop()

    counting = [e for e in poller.exports if e.counting]
    assert len(counting) >= 6, "the exporter must collect many times during the workload"
    # The table's record matches what the workload did (so the truth is not vacuous): the
    # three tasks of the held queue were enqueued before the baseline and finished after it;
    # the history's finished tasks count nowhere; the killed worker's task never ended.
    assert truth.counters["enqueued"] == {
        path("ok"): 25, path("bad"): 3, path("boom"): 2, path("later"): 2, path("slow"): 1,
        path("parked"): 2,
    }  # fmt: skip
    assert truth.counters["completed"] == {path("ok"): 28, path("later"): 2}
    assert truth.counters["failures"] == {
        (path("bad"), "builtins.ValueError"): 3,
        (path("boom"), "tests.system.presets.django_project.tasks.BoomError"): 2,
    }
    # ... and the exporter, polling all along, agrees with it exactly, counter by counter, the
    # exception classes (unbounded label values) counted as errors.
    assert poller.tallies.counters() == as_counted(truth.counters)
    assert set(poller.tallies.counters()["failures"]) == {
        (path("bad"), ERROR),
        (path("boom"), ERROR),
    }
    assert observed(poller.tallies.duration) == truth.histogram_counts
    assert observed(poller.tallies.wait) == truth.histogram_counts
    assert observed(poller.tallies.latency) == truth.histogram_counts
    # The delayed tasks waited for their run time, not for a worker: wait short, latency long.
    assert poller.tallies.latency[path("later")].total >= 2 * 3.0
    assert poller.tallies.wait[path("later")].total < poller.tallies.latency[path("later")].total
    # A quiescent end: the killed worker's task still RUNNING, the parked ones READY.
    # No task was deleted before its end could be read, nor counting held back.
    said = [r.getMessage() for r in caplog.records if r.name == "exporter.poller"]
    assert not [line for line in said if "tasks were deleted" in line or "delay" in line], said
    last = poller.last
    assert nonzero({t: {"pending": g.pending, "running": g.running, "scheduled": g.scheduled}
                    for t, g in last.gauges.items()}) == nonzero(truth.gauges)  # fmt: skip
    assert truth.gauges == {
        path("slow"): {"pending": 0, "running": 1, "scheduled": 0},
        path("parked"): {"pending": 3, "running": 0, "scheduled": 3},
    }
    assert last.gauges[path("slow")].running_oldest > 0
    assert last.gauges[path("parked")].oldest_pending_age > 0
    assert last.gauges[path("parked")].oldest_ready_wait == 0  # not ready before its time

    # The same, as the exporter serves it: every counter on /metrics equals the table's (the
    # loop above), every gauge series equals the table at this quiet moment.
    # Every gauge series, the zero-filled ones of the drained task paths included.
    shown = {(name, dict(labels)["job_type"], dict(labels).get("status", "scheduled")): value
             for (name, labels), value in samples.items()
             if name in ("jobqueue_jobs", "jobqueue_jobs_scheduled")}  # fmt: skip
    assert {key[1] for key in shown} == set(truth.counters["enqueued"])
    for (_, task, status), value in shown.items():
        assert value == truth.gauges.get(task, {}).get(status, 0), (task, status)
    names = {name for name, labels in samples if ("queue", QUEUE) in labels}
    assert "jobqueue_job_wait_seconds_count" in names
    # What the library cannot tell has no series: no lease (stuck), no retry (requeued).
    assert not names & {"jobqueue_stuck_jobs", "jobqueue_jobs_requeued_total"}
    statuses = {dict(labels)["status"] for name, labels in samples if name == "jobqueue_jobs"}
    assert statuses == {"pending", "running"}


def _counters(samples: Samples) -> dict[str, dict[Any, float]]:
    return {k: v for k, v in counters_of(samples, QUEUE).items() if v}


async def test_per_cycle_queries_use_indexes_on_a_million_results(empty_dsn: str) -> None:
    require("django_tasks_db")
    from tests.system.presets.django_explain import measure_django_tasks
    from tests.system.presets.explain import ROWS

    result = await measure_django_tasks(empty_dsn)
    assert set(result.plans) == {"horizon", "snapshot", "gauges", "changes"}
    assert result.seq_scans() == [], result.summary()
    # What a cycle reads follows the backlog and the new work, never the history.
    assert max(result.rows_read) < ROWS // 50, result.summary()
    print(result.summary())
