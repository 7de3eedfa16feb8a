"""The processes a bench starts (the exporter, the simulated fleet), their footprint and readiness.

The exporter and the fleet run in their own processes, so their CPU, memory and event-loop
delays never mix with the measuring process's.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import aiohttp
import asyncpg

from exporter.db import APPLICATION_NAME
from exporter.demo.cluster import free_port
from exporter.demo.fleet import Fleet, FleetConfig

ROOT = Path(__file__).resolve().parent.parent


class Process:
    """A child process (the exporter, the fleet) with its footprint read from /proc."""

    def __init__(self, args: list[str], cwd: Path = ROOT) -> None:
        self.proc = subprocess.Popen(
            args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self.pid = self.proc.pid
        self.started = time.monotonic()

    def rss_bytes(self) -> int:
        """Resident set size now."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def cpu_seconds(self) -> float:
        """User + system CPU time so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def open_fds(self) -> int:
        """Open file descriptors now."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def stop(self) -> str:
        """Terminate, wait, and return what it wrote to stderr (for a failure message)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        err = self.proc.stderr.read() if self.proc.stderr else b""
        return err.decode(errors="replace")[-2000:]


def start_exporter(dsn: str, interval: str = "1s") -> tuple[Process, int]:
    """Start ``python -m exporter run`` on a free port; return the process and the port."""
    port = free_port()
    proc = Process(
        [
            sys.executable, "-m", "exporter", "run", f"--database.dsn={dsn}",
            f"--web.listen-address=127.0.0.1:{port}", f"--collect.interval={interval}",
            "--log.level=warn",
        ]
    )  # fmt: skip
    return proc, port


def start_fleet(dsn: str, rate: float, job_types: int = 50) -> Process:
    """Start the simulated fleet in its own process at ``rate`` jobs per second."""
    code = "import asyncio, sys; from bench.processes import run_fleet; " + (
        "asyncio.run(run_fleet(sys.argv[1], float(sys.argv[2]), int(sys.argv[3])))"
    )
    return Process([sys.executable, "-c", code, dsn, str(rate), str(job_types)])


async def run_fleet(dsn: str, rate: float, job_types: int) -> None:
    """Run the fleet until killed: enough workers for ``rate`` with sub-second jobs."""
    config = FleetConfig(
        enqueue_rate=rate, rate_swing=0.0, job_types=job_types, workers=24,
        duration=(0.2, 1.5), lease_seconds=30.0, reap_interval=5.0, operator_interval=15.0,
        # One malformed result (a bool where a cost belongs) makes the queue's own
        # cost_buckets() fail outright, and those reports are what we compare against.
        p_malformed=0.0,
    )  # fmt: skip
    fleet = Fleet(dsn, config)
    await fleet.start()
    await asyncio.Event().wait()


async def wait_ready(port: int, proc: Process, wait_seconds: float = 30.0) -> None:
    """Wait until the exporter's /readyz answers 200 (a first collection succeeded)."""
    deadline = time.monotonic() + wait_seconds
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.proc.poll() is not None:
                raise RuntimeError(f"exporter exited: {proc.stop()}")
            try:
                async with session.get(f"http://127.0.0.1:{port}/readyz") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError(f"exporter not ready after {wait_seconds}s: {proc.stop()}")


async def exporter_connections(dsn: str) -> int:
    """Database connections the exporter holds now."""
    conn = await asyncpg.connect(dsn)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                APPLICATION_NAME,
            )
        )
    finally:
        await conn.close()


def unique_name(prefix: str) -> str:
    """A database name nobody else uses."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"
