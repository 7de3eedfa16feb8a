"""Takeover without loss at Prometheus' own cadence (issue 34): a 1 s collection interval, a
scrape every 10 s, and the leader SIGKILLed half a second before a scrape.

Counts no scrape carried used to be confirmed on the slot once three intervals old (3 s here),
so the seven seconds of counts between the last scrape and the kill were confirmed, never
scraped, and never counted again by the standby: measured on 5b548ac, 1,149 completions summed
over the pods against a truth of 1,327. Now they wait twice the longest gap between scrapes the
leader has served (20 s), so the standby resumes at the last scraped position and counts them.
Real ``python -m exporter`` processes, the simulated fleet as the workload and its tally as the
truth; the test is the scraper, which keeps each pod's last scraped counters as a Prometheus
would.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from exporter.demo.fleet import Fleet, FleetConfig
from tests.conftest import fetchval
from tests.helpers import wait_for_completions
from tests.logical_cluster import PUBLICATION, LogicalDatabase
from tests.system.exporters import (
    QUEUE,
    Process,
    counter,
    leader,
    scrape,
    start_exporter,
    stop_all,
    until,
    up,
)
from tests.system.test_logical_takeover import COUNTERS, truth_of

pytestmark = [pytest.mark.slow, pytest.mark.logical, pytest.mark.daemon]

INTERVAL = 1.0
SCRAPE_EVERY = 10.0
KILL_BEFORE = 0.5  # seconds before the scrape that never comes
SLOT = f"jobqueue_{QUEUE}"


async def scrape_all(processes: list[Process], last: dict[str, dict[str, float]]) -> None:
    """One scrape of every live process: each one's counters as a Prometheus keeps them."""
    for process in processes:
        if process.alive() and (samples := await scrape(process)) is not None:
            last[process.name] = {n: counter(samples, n) for n in COUNTERS}


async def test_a_leader_killed_just_before_a_slow_scrape_loses_nothing_a_scrape_did_not_see(
    tmp_path: Path, logical_db: LogicalDatabase
) -> None:
    config = tmp_path / "exporter.yml"
    config.write_text(f"collect:\n  logical_publication: {PUBLICATION}\n")
    flags = ("--collect.counting=logical", f"--config.file={config}")
    processes: list[Process] = []
    last: dict[str, dict[str, float]] = {}
    # The exporters connect as their documented role; the fleet is the application.
    dsn = logical_db.dsn
    fleet = Fleet(logical_db.admin, FleetConfig.fast(job_types=4, enqueue_rate=30.0))
    try:
        first = start_exporter("pod0", dsn, tmp_path, INTERVAL, *flags)
        processes.append(first)
        await until(first, lambda s: leader(s) == 1 and up(s) == 1)
        deadline = time.monotonic() + 30
        while not await fetchval(
            dsn, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", SLOT
        ):
            assert time.monotonic() < deadline, first.log.read_text()[-3000:]
            await asyncio.sleep(0.1)
        second = start_exporter("pod1", dsn, tmp_path, INTERVAL, *flags)
        processes.append(second)
        await until(second, lambda s: leader(s) == 0 and up(s) == 1)
        await fleet.start()
        # Four scrapes 10 s apart: the leader learns how often it is scraped.
        started = time.monotonic()
        for n in range(4):
            await asyncio.sleep(max(0.0, started + n * SCRAPE_EVERY - time.monotonic()))
            await scrape_all(processes, last)
        # Nine and a half seconds of counts no scrape has carried, then the kill.
        await asyncio.sleep(max(0.0, started + 4 * SCRAPE_EVERY - KILL_BEFORE - time.monotonic()))
        first.popen.send_signal(signal.SIGKILL)
        first.popen.wait(10)
        await until(second, lambda s: leader(s) == 1, 30)
        await wait_for_completions(fleet, 60)
        await fleet.pause()
        truth = truth_of(fleet.tally)
        # The successor's counters settle (it scrapes as often as it likes now: what is
        # tested is what the dead leader's last scrape left it).
        totals: dict[str, float] = {}
        deadline = time.monotonic() + 60
        while True:
            await scrape_all(processes, last)
            totals = {n: sum(v[n] for v in last.values()) for n in COUNTERS}
            if totals == {n: float(truth[n]) for n in COUNTERS} or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert fleet.errors == 0  # the tally is exact only then
    finally:
        await fleet.stop()
        stop_all(processes)
    assert truth["jobqueue_jobs_completed_total"] > 200, "too little work to prove anything"
    assert totals == {n: float(truth[n]) for n in COUNTERS}, (last, truth)
