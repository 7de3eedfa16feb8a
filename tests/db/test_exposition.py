"""The real exposition: promtool accepts it, odd label values survive, cardinality stays capped."""

from __future__ import annotations

import subprocess

import pytest

from exporter.demo.fleet import Fleet, FleetConfig
from exporter.metrics import exposed_metric_names, render
from exporter.model import ConfigStatus
from tests.conftest import execute
from tests.helpers import fast_settings, make_poller, parse, value, wait_for_completions

pytestmark = pytest.mark.daemon

PROMTOOL = "/usr/bin/promtool"


def promtool_check_metrics(text: bytes) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=text.decode(),
        capture_output=True,
        text=True,
        check=False,
    )


async def test_exposition_of_a_live_queue_passes_promtool_check_metrics(db_dsn: str) -> None:
    poller = make_poller(fast_settings(db_dsn))
    fleet = Fleet(db_dsn, FleetConfig.fast(job_types=4))
    try:
        assert await poller.collect_once()
        await fleet.start()
        await wait_for_completions(fleet, 30)
        await fleet.pause()
        assert await poller.collect_once()
        # With the configuration's gauges, as the service renders it.
        text = render([poller.view()], config=ConfigStatus(last_success_at=1.8e9))
    finally:
        await fleet.stop()
        await poller.database.close()
    done = promtool_check_metrics(text)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == ""
    names = {name for (name, _) in parse(text.decode())}
    # Every series the exporter defines is there (process_* come from prometheus-client), but
    # cancellations: the reference table has none (the presets' test checks that counter); and
    # the slot's: a polling queue has none (tests/db/test_logical_gap.py checks them).
    slot = {n for n in exposed_metric_names() if n.startswith("jobqueue_exporter_logical_")}
    assert exposed_metric_names() - slot <= names | {
        "jobqueue_jobs",
        "jobqueue_jobs_cancelled_total",
    }
    assert not [n for n in names if n.endswith("_created")]


async def test_ten_thousand_job_types_and_hostile_names_keep_the_exposition_valid(
    db_dsn: str,
) -> None:
    await execute(db_dsn, "INSERT INTO job (job_type) SELECT g FROM generate_series(1, 10000) AS g")
    hostile = {1: 'quo"te', 2: "back\\slash", 3: "new\nline", 4: "ünïcødé ✓"}
    poller = make_poller(fast_settings(db_dsn, job_types=hostile, max_job_types=50))
    try:
        assert await poller.collect_once()
        text = render([poller.view()])
    finally:
        await poller.database.close()
    done = promtool_check_metrics(text)
    assert done.returncode == 0, done.stdout + done.stderr
    samples = parse(text.decode())
    pending = {
        dict(labels)["job_type"]: count
        for (name, labels), count in samples.items()
        if name == "jobqueue_jobs" and dict(labels)["status"] == "pending"
    }
    assert len(pending) == 51  # 50 labels, then "other"
    assert {hostile[i] for i in hostile} <= set(pending)
    assert pending["other"] == 10000 - 50
    assert sum(pending.values()) == 10000
    assert value(samples, "jobqueue_exporter_job_types_folded") == 10000 - 50
