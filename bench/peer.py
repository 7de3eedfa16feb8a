"""query-exporter beside ours: the queue's ops() on an interval, as its users would configure it.

query-exporter is installed in a virtualenv of its own (its pins may clash with ours); point
``BENCH_QUERY_EXPORTER`` at its ``query-exporter`` script, or have it on PATH.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml

from bench.cycles import QUEUE_OPS
from bench.processes import Process
from bench.serving import scrape_text, serving
from bench.stats import percentile
from exporter.demo.cluster import free_port

ENV = "BENCH_QUERY_EXPORTER"
COLUMNS = (
    "pending", "running", "done", "dead", "dead_1h", "stuck_running", "oldest_pending_sec",
    "deadline_1h", "cost_1h_usd",
)  # fmt: skip


def find_query_exporter() -> str | None:
    """The query-exporter script, from BENCH_QUERY_EXPORTER or PATH."""
    chosen = os.environ.get(ENV) or shutil.which("query-exporter")
    return chosen if chosen and Path(chosen).exists() else None


def write_config(path: Path, dsn: str, interval: float) -> None:
    """A query-exporter config that runs ops() every ``interval`` seconds."""
    # query-exporter names metrics after the columns, so the ops() columns are aliased.
    select = ", ".join(f"{c} AS jobqueue_{c}" for c in COLUMNS)
    config = {
        "databases": {"queue": {"dsn": dsn.replace("postgresql://", "postgresql+psycopg2://")}},
        "metrics": {
            f"jobqueue_{c}": {"type": "gauge", "description": f"ops() {c}"} for c in COLUMNS
        },
        "queries": {
            "ops": {
                "interval": interval,
                "databases": ["queue"],
                "metrics": [f"jobqueue_{c}" for c in COLUMNS],
                "sql": f"SELECT {select} FROM ({QUEUE_OPS}) AS ops",
            }
        },
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def _latency_from_metrics(text: str) -> tuple[float, int]:
    """Mean query_latency (ms) and the number of executions, from query-exporter's exposition."""
    total, count = 0.0, 0
    for line in text.splitlines():
        if line.startswith("query_latency_sum"):
            total = float(line.rsplit(" ", 1)[1])
        elif line.startswith("query_latency_count"):
            count = int(float(line.rsplit(" ", 1)[1]))
    return (total / count * 1000 if count else 0.0), count


async def measure_peer(
    dsn: str, *, interval: float, run_seconds: float, clients: int, serve_seconds: float
) -> dict[str, Any]:
    """Run query-exporter against ``dsn``; its per-cycle time, /metrics latency and RSS."""
    script = find_query_exporter()
    if script is None:
        return {"available": False, "reason": f"query-exporter not found (set {ENV})"}
    workdir = Path(tempfile.mkdtemp(prefix="bench-qe-"))
    try:
        config = workdir / "config.yaml"
        write_config(config, dsn, interval)
        port = free_port()
        proc = Process([script, "--config", str(config), "-H", "127.0.0.1", "-p", str(port),
                        "-L", "warning"])  # fmt: skip
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            text = ""
            rss: list[int] = []
            for _ in range(int(run_seconds / 0.5)):
                await asyncio.sleep(0.5)
                if proc.proc.poll() is not None:
                    return {"available": False, "reason": "exited: " + proc.stop()[-500:]}
                rss.append(proc.rss_bytes())

            text = await scrape_text(url)
            mean_ms, count = _latency_from_metrics(text)
            served = await serving(url, clients, serve_seconds)
            rss.append(proc.rss_bytes())
        finally:
            err = proc.stop()
        if count == 0:
            return {"available": False, "reason": "no query ran: " + err[-500:]}
        return {
            "available": True,
            "version": _version(script),
            "interval_s": interval,
            "cycle_ms": mean_ms,
            "cycles": count,
            "serving": served,
            "rss_max_bytes": max(rss),
            "rss_p50_bytes": percentile(rss, 50),
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _version(script: str) -> str:
    import subprocess

    done = subprocess.run([script, "--version"], capture_output=True, text=True, check=False)
    return (done.stdout or done.stderr).strip().splitlines()[-1] if done.returncode == 0 else "?"
