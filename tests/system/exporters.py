"""Real ``python -m exporter`` subprocesses on one queue, and reading them as a scraper does:
shared by the system tests of leader election and takeover."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from exporter.demo.cluster import free_port
from tests.helpers import Samples, get, parse

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "jobs"
SERIES = "jobqueue_jobs_completed_total"


@dataclass
class Process:
    """One exporter subprocess and the port it serves."""

    name: str
    port: int
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None


def start_exporter(name: str, dsn: str, tmp_path: Path, interval: float, *flags: str) -> Process:
    """``python -m exporter`` for the queue, the DSN in its environment (never in argv)."""
    port = free_port()
    log = tmp_path / f"{name}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [
                sys.executable, "-m", "exporter",
                f"--collect.interval={interval:g}s",
                f"--queue.name={QUEUE}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=debug",
                *flags,
            ],
            cwd=ROOT,
            env={**os.environ, "JOBQUEUE_EXPORTER_DSN": dsn},
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    return Process(name, port, popen, log)


def stop_all(processes: Iterable[Process]) -> None:
    """SIGTERM every live process and wait for it (SIGKILL past 30 s)."""
    for process in processes:
        if process.alive():
            process.popen.send_signal(signal.SIGTERM)
            try:
                process.popen.wait(30)
            except subprocess.TimeoutExpired:
                process.popen.kill()


async def scrape(process: Process) -> Samples | None:
    """The process's samples, or None while it does not answer."""
    try:
        status, body, _ = await get(process.port, "/metrics")
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None
    return parse(body) if status == 200 else None


def exports_queue(samples: Samples | None) -> bool:
    """True when the exposition carries the queue's counters (only a collector's does)."""
    return bool(samples) and any(
        name == SERIES and ("queue", QUEUE) in labels
        for name, labels in samples  # type: ignore[union-attr]
    )


def leader(samples: Samples | None) -> float | None:
    return None if not samples else samples.get(("jobqueue_exporter_leader", (("queue", QUEUE),)))


def up(samples: Samples | None) -> float | None:
    return None if not samples else samples.get(("jobqueue_up", (("queue", QUEUE),)))


def counter(samples: Samples, name: str) -> float:
    """A counter summed over the queue's job types (and reasons)."""
    return sum(v for (n, labels), v in samples.items() if n == name and ("queue", QUEUE) in labels)


async def until(
    process: Process, check: Callable[[Samples], bool], within: float = 60.0
) -> Samples:
    """Scrape until ``check(samples)`` holds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        assert process.alive(), process.log.read_text()[-3000:]
        samples = await scrape(process)
        if samples is not None and check(samples):
            return samples
        await asyncio.sleep(0.1)
    raise AssertionError(f"{process.name} never got there; log:\n{process.log.read_text()[-3000:]}")
