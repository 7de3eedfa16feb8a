"""Takeover without loss in counting mode ``logical`` (issue 29): across leader SIGKILLs with a
standby, the counters summed over every pod as a scraper saw them (each dead leader's last
scraped values plus its successors') equal the fleet's ground truth, neither less nor more.

Real ``python -m exporter`` subprocesses share one replication slot on a throwaway cluster with
``wal_level=logical`` while the simulated fleet drives the queue. The test is the scraper: it
scrapes every live process every quarter second and keeps each one's last scraped counters.
Each leader is SIGKILLed, the fleet running, right after a successful scrape that showed counts
of a new cycle: the sharpest moment for a double count, since a leader that confirmed the slot
only at its next cycle (1a32fe8) had served counts it had not confirmed, and the test failed
there (+44 to +108 enqueued per kill). The standby then resumes at the slot's
confirmed position. Four kills, a fresh standby before each, the last within two cycles of its
leader's own takeover (a leader that has not confirmed anything yet). After most takeovers the
fleet pauses until the counters settle, so the figures (``-s``) say what each kill cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from exporter.demo.fleet import Fleet, FleetConfig
from exporter.demo.tally import Tally
from tests.conftest import fetchval
from tests.helpers import wait_for_completions
from tests.logical_cluster import PUBLICATION, logical_cluster, published_database
from tests.system.exporters import (
    QUEUE,
    Process,
    counter,
    exports_queue,
    leader,
    scrape,
    start_exporter,
    stop_all,
    until,
    up,
)

pytestmark = [pytest.mark.slow, pytest.mark.daemon, pytest.mark.logical]

INTERVAL = 2.0
SCRAPE_EVERY = 0.25
LEAD_FOR = 150  # completions: about five intervals at the fleet's rate
# Per kill: the completions the leader lives for first, and whether the fleet then pauses
# until the counters settle (to read what the kill cost) before the next round. The last
# leader is killed at its first scrape with counts, with no pause since its own takeover: a
# leader that dies within two cycles of taking over has confirmed nothing on the slot yet.
ROUNDS = ((LEAD_FOR, True), (LEAD_FOR, True), (LEAD_FOR, False), (0, True))
KILLS = len(ROUNDS)
SLOT = f"jobqueue_{QUEUE}"  # the default slot name
COUNTERS = (
    "jobqueue_jobs_enqueued_total",
    "jobqueue_jobs_completed_total",
    "jobqueue_job_failures_total",
    "jobqueue_jobs_dead_total",
    "jobqueue_jobs_requeued_total",
)


@dataclass
class Scraper:
    """Scrapes every live process and keeps, per process, the counters of its last successful
    scrape: what a Prometheus would hold of a pod that then died."""

    processes: list[Process]
    last: dict[str, dict[str, float]] = field(default_factory=dict)
    led_from: dict[str, float] = field(default_factory=dict)
    doomed: Process | None = None
    killed: asyncio.Event = field(default_factory=asyncio.Event)
    killed_at: float = 0.0

    async def run(self) -> None:
        while True:
            for process in list(self.processes):
                if not process.alive():
                    continue
                samples = await scrape(process)
                if samples is None:
                    continue
                values = {n: counter(samples, n) for n in COUNTERS}
                fresh = values != self.last.get(process.name)
                if process is self.doomed and leader(samples) == 1 and fresh:
                    # Before anything else: the leader dies having served the counts of a
                    # cycle it has not confirmed on the slot yet (it does at its next cycle):
                    # a body that moved is one rendered since that cycle's drain.
                    process.popen.send_signal(signal.SIGKILL)
                    self.killed_at = time.monotonic()
                    self.doomed = None
                    self.killed.set()
                # A standby's exposition has none of the queue's counters: zeros, as a
                # Prometheus would sum it.
                self.last[process.name] = values
                if leader(samples) == 1:
                    self.led_from.setdefault(process.name, time.monotonic())
            await asyncio.sleep(SCRAPE_EVERY)

    async def kill_after_next_scrape(self, process: Process) -> float:
        """SIGKILL ``process`` right after its next successful scrape that shows counts it had
        not shown before; the moment of the kill."""
        self.killed.clear()
        self.doomed = process
        async with asyncio.timeout(30):
            await self.killed.wait()
        process.popen.wait(10)
        return self.killed_at

    async def successor(self) -> Process:
        """The live process that has led (each leads once, until it is killed)."""
        deadline = time.monotonic() + 30
        while True:
            for process in self.processes:
                if process.alive() and process.name in self.led_from:
                    return process
            assert time.monotonic() < deadline, "no standby took over"
            await asyncio.sleep(0.05)

    async def settle(self, leader: Process, truth: dict[str, int]) -> dict[str, float]:
        """The totals once the paused fleet's last commits are counted: every total at least
        the truth and the leader's counters still for two intervals; short of the truth at
        the deadline fails."""
        deadline = time.monotonic() + 30
        seen, still_since = self.last.get(leader.name), time.monotonic()
        while True:
            now = time.monotonic()
            if self.last.get(leader.name) != seen:
                seen, still_since = self.last.get(leader.name), now
            totals = self.totals()
            if all(totals[n] >= truth[n] for n in COUNTERS) and now - still_since >= 2 * INTERVAL:
                return totals
            assert now < deadline, f"the counters never reached the truth {truth}: {self.figures()}"
            await asyncio.sleep(SCRAPE_EVERY)

    def totals(self) -> dict[str, float]:
        return {n: sum(values[n] for values in self.last.values()) for n in COUNTERS}

    def figures(self) -> str:
        return "; ".join(
            f"{name}: " + ", ".join(f"{short(n)} {v:g}" for n, v in values.items())
            for name, values in self.last.items()
        )


def short(name: str) -> str:
    return name.removeprefix("jobqueue_").removesuffix("_total")


def truth_of(tally: Tally) -> dict[str, int]:
    return {
        "jobqueue_jobs_enqueued_total": sum(tally.enqueued.values()),
        "jobqueue_jobs_completed_total": sum(tally.completed.values()),
        "jobqueue_job_failures_total": sum(tally.failures.values()),
        "jobqueue_jobs_dead_total": sum(tally.dead.values()),
        "jobqueue_jobs_requeued_total": sum(tally.requeued.values()),
    }


def kill_figures(settled: list[tuple[int, dict[str, float], dict[str, int]]]) -> str:
    """Per settling, the totals against the truth, and what the kills since the previous
    settling added."""
    rounds = []
    over_before = {n: 0.0 for n in COUNTERS}
    kills_before = 0
    for kills, totals, truth in settled:
        parts = []
        for n in COUNTERS:
            over = totals[n] - truth[n]
            parts.append(f"{short(n)} {totals[n]:g} vs {truth[n]} ({over - over_before[n]:+g})")
            over_before[n] = over
        which = "+".join(str(k) for k in range(kills_before + 1, kills + 1))
        rounds.append(f"kill {which}: " + ", ".join(parts))
        kills_before = kills
    return " | ".join(rounds)


@contextlib.asynccontextmanager
async def scraping(processes: list[Process]) -> AsyncIterator[Scraper]:
    scraper = Scraper(processes)
    task = asyncio.create_task(scraper.run())
    try:
        yield scraper
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def slot_active(dsn: str) -> bool:
    return bool(
        await fetchval(dsn, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", SLOT)
    )


async def test_leader_sigkills_lose_and_double_nothing_as_scraped(tmp_path: Path) -> None:
    config = tmp_path / "exporter.yml"
    config.write_text(f"collect:\n  logical_publication: {PUBLICATION}\n")
    flags = ("--collect.counting=logical", f"--config.file={config}")
    processes: list[Process] = []

    def start(name: str) -> Process:
        process = start_exporter(name, dsn, tmp_path, INTERVAL, *flags)
        processes.append(process)
        return process

    with logical_cluster({"max_slot_wal_keep_size": "1GB"}) as cluster:
        dsn = await published_database(cluster, "queue")
        fleet = Fleet(dsn, FleetConfig.fast(job_types=4, enqueue_rate=30.0))
        try:
            current = start("pod0")
            # No job yet, so no counter series either: leading and reaching the database is
            # what shows it ready.
            await until(current, lambda s: leader(s) == 1 and up(s) == 1)
            # The stream thread creates the slot on its own time; what commits before it
            # exists is history, in no counter, so the fleet waits for the slot in use.
            deadline = time.monotonic() + 30
            while not await slot_active(dsn):
                assert time.monotonic() < deadline, current.log.read_text()[-3000:]
                await asyncio.sleep(0.1)
            await fleet.start()
            takeovers: list[float] = []
            # After each settling: the kills so far, the summed totals and the truth.
            settled: list[tuple[int, dict[str, float], dict[str, int]]] = []
            async with scraping(processes) as scraper:
                pods = 1
                for round_, (lead_for, settle) in enumerate(ROUNDS):
                    # A fresh standby before each kill; the one for a quick round's kill is
                    # started a round ahead, since starting one takes about a second.
                    quick_next = round_ + 1 < KILLS and ROUNDS[round_ + 1][0] == 0
                    while pods < round_ + 2 + quick_next:
                        standby = start(f"pod{pods}")
                        pods += 1
                        await until(standby, lambda s: leader(s) == 0 and up(s) == 1)
                    await wait_for_completions(fleet, lead_for)
                    killed = await scraper.kill_after_next_scrape(current)
                    # Whichever standby took the lock; the scraper's own first sight of it
                    # leading dates the takeover.
                    current = await scraper.successor()
                    await until(current, lambda s: leader(s) == 1 and exports_queue(s), 30)
                    takeovers.append(scraper.led_from[current.name] - killed)
                    if not settle:
                        continue
                    # Paused after the takeover only, to read what the kill cost; the next
                    # kill again comes with the fleet running.
                    await fleet.pause()
                    truth = truth_of(fleet.tally)
                    totals = await scraper.settle(current, truth)
                    settled.append((round_ + 1, totals, truth))
                    fleet.resume()
                await wait_for_completions(fleet, 60)
                await fleet.pause()
                truth = truth_of(fleet.tally)
                totals = await scraper.settle(current, truth)
                figures = scraper.figures()
            assert fleet.errors == 0  # the tally is exact only then
        finally:
            await fleet.stop()
            stop_all(processes)
    per_kill = kill_figures(settled)
    print(
        f"FIGURE logical takeover, interval {INTERVAL:g}s, {KILLS} leader SIGKILLs right after "
        f"a scrape that showed a new cycle: takeovers "
        f"{', '.join(f'{t:.2f}s' for t in takeovers)}; per process {figures}; "
        f"summed {', '.join(f'{short(n)} {totals[n]:g}' for n in COUNTERS)}; "
        f"truth {', '.join(f'{short(n)} {truth[n]}' for n in COUNTERS)}; "
        f"after each kill, summed vs truth (this kill's part): {per_kill}"
    )
    over = {short(n): totals[n] - truth[n] for n in COUNTERS if totals[n] != truth[n]}
    assert not over, (
        f"summed over the pods minus the truth: {over}; per kill: {per_kill}; per process: "
        f"{figures}"
    )
    assert all(t <= 2 * INTERVAL for t in takeovers), takeovers
