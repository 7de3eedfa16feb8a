"""Takeover without loss or double count from the change stream (issue 29's done-when): real
exporter processes with ``collect.counting: logical`` and a leader election on one queue, the
leader SIGKILLed right after a scrape, three times over, while the fleet keeps working.

The test is the scraper. Prometheus keeps each pod's series as it last scraped them, so the
truth a scraper sees is the sum over pods of their last scraped counters: the dead leaders'
plus the last leader's. That sum must equal the fleet's ground truth for every transition
counter. The kill comes right after the first scrape that follows a collection, when that scrape
carries counts the previous collection had not: a leader that confirmed its slot only at its
next collection would hand the standby that stretch to count again.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from exporter.demo.fleet import Fleet, FleetConfig
from exporter.demo.tally import Tally
from tests.conftest import fetchval
from tests.helpers import Samples, wait_for_completions
from tests.logical_cluster import PUBLICATION, logical_cluster, published_database
from tests.system.test_election import (
    Process,
    counter,
    exports_queue,
    leader,
    processes,  # noqa: F401  (the fixture that stops every process started)
    scrape,
    start_exporter,
    until,
    up,
)

pytestmark = pytest.mark.slow

INTERVAL = 3.0  # long enough that one collection's counts are many jobs
ROUNDS = 3  # leaders SIGKILLed, each right after a scrape
SLOT = "jobqueue_takeover"
COUNTERS = (
    "jobqueue_jobs_enqueued_total",
    "jobqueue_jobs_completed_total",
    "jobqueue_job_failures_total",
    "jobqueue_jobs_dead_total",
    "jobqueue_jobs_requeued_total",
)
COLLECTIONS = "jobqueue_exporter_collections_total"


def truth_of(tally: Tally) -> dict[str, float]:
    """The fleet's committed transitions, summed as the counters are."""
    return {
        COUNTERS[0]: sum(tally.enqueued.values()),
        COUNTERS[1]: sum(tally.completed.values()),
        COUNTERS[2]: sum(tally.failures.values()),
        COUNTERS[3]: sum(tally.dead.values()),
        COUNTERS[4]: sum(tally.requeued.values()),
    }


class Scraper:
    """Keeps, per process, the counters of its last scrape that carried the queue's series."""

    def __init__(self) -> None:
        self.last: dict[str, Counter[str]] = {}

    async def scrape(self, process: Process) -> Samples | None:
        samples = await scrape(process)
        if samples is not None and exports_queue(samples):
            seen = self.last.setdefault(process.name, Counter())
            for name in COUNTERS:
                # Counters only grow within one process: the largest value is the last one
                # scraped, whichever of two overlapping scrapes got its answer last.
                seen[name] = max(seen[name], counter(samples, name))
        return samples

    def total(self) -> dict[str, float]:
        return {name: sum(seen[name] for seen in self.last.values()) for name in COUNTERS}


async def scraping(scraper: Scraper, live: list[Process]) -> None:
    """Scrape every live process all along, as Prometheus would (every 0.3 s)."""
    while True:
        for process in list(live):
            if process.alive():
                await scraper.scrape(process)
        await asyncio.sleep(0.3)


async def kill_right_after_a_fresh_scrape(scraper: Scraper, process: Process) -> None:
    """SIGKILL ``process`` as soon as a scrape of it returns the first counts of a new
    collection."""
    samples = await until(process, lambda s: exports_queue(s))
    seen = counter(samples, COLLECTIONS)
    deadline = time.monotonic() + 10 * INTERVAL
    while True:
        assert time.monotonic() < deadline, "no new collection to scrape"
        samples = await scraper.scrape(process)
        if samples is not None and counter(samples, COLLECTIONS) > seen:
            process.popen.send_signal(signal.SIGKILL)
            break
        await asyncio.sleep(0.01)
    process.popen.wait(10)


async def test_leaders_sigkilled_right_after_a_scrape_leave_the_scraped_sums_exact(
    tmp_path: Path,
    processes: list[Process],  # noqa: F811
) -> None:
    flags = (
        "--collect.counting=logical",
        f"--collect.logical-slot={SLOT}",
        f"--collect.logical-publication={PUBLICATION}",
    )
    scraper = Scraper()
    with logical_cluster({"max_slot_wal_keep_size": "1GB"}) as cluster:
        dsn = await published_database(cluster, "queue")
        names = iter(f"pod{n}" for n in range(ROUNDS + 2))

        def start() -> Process:
            process = start_exporter(next(names), dsn, tmp_path, *flags, interval=INTERVAL)
            processes.append(process)
            return process

        current = start()
        # No job type has a series before the first job: leading and up is all there is.
        await until(current, lambda s: leader(s) == 1 and up(s) == 1)
        # Counting starts where the slot does: the fleet starts once the leader streams.
        deadline = time.monotonic() + 60
        while not await fetchval(
            dsn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active", SLOT
        ):
            assert time.monotonic() < deadline, current.log.read_text()[-3000:]
            await asyncio.sleep(0.1)
        fleet = Fleet(dsn, FleetConfig.fast(job_types=3, enqueue_rate=30.0))
        sampler = asyncio.create_task(scraping(scraper, processes))
        took: list[float] = []
        try:
            await fleet.start()
            for _ in range(ROUNDS):
                standby = start()
                await until(standby, lambda s: leader(s) == 0 and up(s) == 1)
                await wait_for_completions(fleet, 40)
                await kill_right_after_a_fresh_scrape(scraper, current)
                killed = time.monotonic()
                await until(standby, lambda s: leader(s) == 1 and exports_queue(s))
                took.append(time.monotonic() - killed)
                current = standby
            await wait_for_completions(fleet, 40)
            await fleet.pause()
            truth = truth_of(fleet.tally)
            # The last leader counts what the fleet committed; the deadline fails the test if
            # the sums never get there.
            deadline = time.monotonic() + 60
            while any(scraper.total()[n] < truth[n] for n in COUNTERS):
                assert time.monotonic() < deadline, (scraper.last, truth)
                await scraper.scrape(current)
                await asyncio.sleep(0.2)
            # Two more collections: nothing more may arrive (a double count would).
            await asyncio.sleep(2 * INTERVAL)
            await scraper.scrape(current)
            assert fleet.errors == 0
        finally:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
            await fleet.stop()
    per_pod = {name: dict(seen) for name, seen in scraper.last.items()}
    print(
        f"FIGURE logical takeover, {ROUNDS} leaders SIGKILLed right after a scrape "
        f"(interval {INTERVAL:g}s): takeovers {', '.join(f'{t:.1f}s' for t in took)}; "
        f"truth {truth}; last scraped per pod {per_pod}"
    )
    assert len(per_pod) == ROUNDS + 1  # every leader was scraped before it died
    assert scraper.total() == truth, {n: scraper.total()[n] - truth[n] for n in COUNTERS}
