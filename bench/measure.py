"""The measurements: the exporter's cycle, the queue's own reports, write overhead, serving, footprint.

The exporter and the simulated fleet run in their own processes, so their CPU, memory and
event-loop delays never mix with the measuring process's.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench.data import create_exporter_indexes, drop_exporter_indexes
from bench.timed import bench_queue, started_poller, timed_cycle
from exporter.counting.changefeed import FOREVER, NIL
from exporter.counting.results import ResultPaths
from exporter.counting.sqltext import render_queries
from exporter.counting.transitions import DEAD_RECOUNT_EVERY
from exporter.db import APPLICATION_NAME
from exporter.demo.cluster import free_port
from exporter.demo.fleet import Fleet, FleetConfig
from exporter.demo.queue import JobQueue

ROOT = Path(__file__).resolve().parent.parent
EXPORTER_INDEXES = (
    "job_exporter_active_idx",
    "job_exporter_updated_at_idx",
    "job_exporter_dead_idx",
)
# The window a real cycle reads: a 15 s interval plus the 30 s commit-lag tolerance.
CHANGES_WINDOW = 45.0

# The queue's own reports, written after job_queue_reference.txt (ops() and cost_buckets()).
QUEUE_OPS = """
SELECT count(*) FILTER (WHERE status = 1) AS pending,
       count(*) FILTER (WHERE status = 2) AS running,
       count(*) FILTER (WHERE status = 3) AS done,
       count(*) FILTER (WHERE status = 4) AS dead,
       count(*) FILTER (WHERE status = 4 AND updated_at > now() - interval '1 hour') AS dead_1h,
       count(*) FILTER (WHERE status = 2 AND ((lease_until IS NOT NULL AND lease_until < now())
                        OR run_started_at < now() - interval '10 minutes')) AS stuck_running,
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 1))::int, 0)
           AS oldest_pending_sec,
       count(*) FILTER (WHERE last_error LIKE 'JobDeadlineExceeded%'
                        AND updated_at > now() - interval '1 hour') AS deadline_1h,
       coalesce(sum((result #>> '{metrics,cost,total_usd}')::float)
                FILTER (WHERE status = 3 AND updated_at > now() - interval '1 hour'), 0)
           AS cost_1h_usd
FROM job
"""
QUEUE_COST_BUCKETS = """
SELECT date_trunc('hour', updated_at) AS bucket, count(*) AS jobs,
       coalesce(sum((result #>> '{metrics,cost,ai_usd}')::float), 0) AS ai_usd,
       coalesce(sum((result #>> '{metrics,cost,proxy_usd}')::float), 0) AS proxy_usd,
       coalesce(sum((result #>> '{metrics,cost,total_usd}')::float), 0) AS total_usd,
       coalesce(avg((result #>> '{metrics,duration_ms}')::float), 0) AS avg_ms
FROM job
WHERE status = 3 AND updated_at > now() - make_interval(hours => $1)
GROUP BY 1 ORDER BY 1
"""


def median(values: Sequence[float]) -> float:
    """The median, or 0.0 for no values."""
    return statistics.median(values) if values else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank), or 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


# -- plans -------------------------------------------------------------------------------


@dataclass
class Plan:
    """What EXPLAIN (ANALYZE, BUFFERS) said about one query."""

    ms: float
    buffers: int
    seq_scan_on_job: bool
    nodes: list[str] = field(default_factory=list)


def _walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    found = [node]
    for child in node.get("Plans", []):
        found += _walk(child)
    return found


async def explain(conn: asyncpg.Connection, sql: str, *args: object) -> Plan:
    """Run EXPLAIN (ANALYZE, BUFFERS) and keep the time, the buffers touched and the scan types."""
    raw = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", *args)
    doc = (json.loads(raw) if isinstance(raw, str) else raw)[0]
    top = doc["Plan"]
    nodes = _walk(top)
    buffers = int(top.get("Shared Hit Blocks", 0)) + int(top.get("Shared Read Blocks", 0))
    seq = any(n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "job" for n in nodes)
    names = sorted(
        {f"{n['Node Type']}" + (f" {n['Index Name']}" if "Index Name" in n else "") for n in nodes}
    )
    return Plan(float(doc["Execution Time"]), buffers, seq, names)


# -- the exporter's cycle ----------------------------------------------------------------


async def exporter_cycle(dsn: str, cycles: int, pause: float) -> dict[str, Any]:
    """Median per-query time of the exporter's own reads over many cycles, plus their plans.

    Like the poller, the dead letter is recounted every DEAD_RECOUNT_EVERY cycles only: the
    median is of ordinary cycles, the recount cycles and the mean over a period are reported
    beside it.
    """
    per_query: dict[str, list[float]] = {}
    totals: list[float] = []
    recounts: list[float] = []
    # The poller's own mode over its own pool: the horizon, then the changes past the cursor
    # in chunks, the dead letter recounted every DEAD_RECOUNT_EVERY cycles.
    poller = await started_poller(bench_queue(dsn))
    try:
        for _ in range(max(cycles, DEAD_RECOUNT_EVERY)):
            await asyncio.sleep(pause)
            durations = await timed_cycle(poller)
            for name, seconds in durations.items():
                per_query.setdefault(name, []).append(seconds * 1000)
            (recounts if "dead" in durations else totals).append(sum(durations.values()) * 1000)
    finally:
        await poller.database.close()
    paths = ResultPaths().as_tuple()
    queries = render_queries("job")
    conn = await asyncpg.connect(dsn)
    try:
        plans = {
            "snapshot": await explain(conn, queries["snapshot"], 600.0),
            "dead": await explain(conn, queries["dead"]),
            "changes_after": await explain(
                conn,
                queries["changes_after"],
                datetime.fromtimestamp(time.time() - 1.0, UTC),
                NIL,
                FOREVER,
                5000,
                *paths,
            ),
        }
        changed = await conn.fetchval(
            "SELECT count(*) FROM job WHERE updated_at > now() - make_interval(secs => $1)",
            CHANGES_WINDOW,
        )
    finally:
        await conn.close()
    return {
        "cycles": cycles,
        "total_ms": median(totals),
        "total_ms_p90": percentile(totals, 90),
        "recount_ms": median(recounts),
        "mean_ms": (sum(totals) + sum(recounts)) / (len(totals) + len(recounts)),
        "queries_ms": {name: median(v) for name, v in per_query.items()},
        "explain": {name: plan.__dict__ for name, plan in plans.items()},
        "explain_total_ms": sum(p.ms for p in plans.values()),
        "buffers": sum(p.buffers for p in plans.values()),
        "seq_scan_on_job": any(p.seq_scan_on_job for p in plans.values()),
        "rows_in_changes_window": int(changed),
    }


async def queue_reports(dsn: str, runs: int) -> dict[str, Any]:
    """Median time of the queue's ops() and cost_buckets(48) on the same database, warm."""
    conn = await asyncpg.connect(dsn)
    try:
        times: dict[str, list[float]] = {"ops": [], "cost_buckets": []}
        await conn.fetch(QUEUE_OPS)  # warm the cache once, as a report polled every 15 s is
        for _ in range(runs):
            for name, sql, args in (
                ("ops", QUEUE_OPS, ()),
                ("cost_buckets", QUEUE_COST_BUCKETS, (48,)),
            ):
                started = time.perf_counter()
                await conn.fetch(sql, *args)
                times[name].append((time.perf_counter() - started) * 1000)
        plans = {
            "ops": await explain(conn, QUEUE_OPS),
            "cost_buckets": await explain(conn, QUEUE_COST_BUCKETS, 48),
        }
    finally:
        await conn.close()
    ops, buckets = median(times["ops"]), median(times["cost_buckets"])
    return {
        "runs": runs,
        "ops_ms": ops,
        "cost_buckets_ms": buckets,
        "total_ms": ops + buckets,
        "buffers": sum(p.buffers for p in plans.values()),
        "explain": {name: plan.__dict__ for name, plan in plans.items()},
    }


# -- the price of the indexes on the queue's writes --------------------------------------


async def _write_loop(dsn: str, seconds: float, clients: int) -> int:
    """Enqueue -> claim -> renew -> complete as fast as ``clients`` connections can; jobs done."""
    deadline = time.monotonic() + seconds
    done = 0

    async def client(n: int) -> None:
        nonlocal done
        conn = await asyncpg.connect(dsn)
        try:
            queue = JobQueue(conn)
            worker = f"bench-writer-{n}"
            while time.monotonic() < deadline:
                job = await queue.enqueue(1 + n % 8, {"bench": True})
                assert job is not None
                # Claim this very job, so the table's own pending rows stay as generated.
                await queue.claim(worker, 30.0, job_id=job.job_id)
                await queue.renew(job.job_id, worker, 30.0)
                result = {
                    "outcome": "ok",
                    "metrics": {"duration_ms": 5, "cost": {"total_usd": 0.01}},
                }
                await queue.complete(job.job_id, worker, result)
                done += 1
        finally:
            await conn.close()

    await asyncio.gather(*(client(n) for n in range(clients)))
    return done


async def _table_stats(conn: asyncpg.Connection) -> tuple[int, int, int]:
    row = await conn.fetchrow(
        "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS wal, n_tup_upd, n_tup_hot_upd "
        "FROM pg_stat_user_tables WHERE relname = 'job'"
    )
    return int(row["wal"]), int(row["n_tup_upd"]), int(row["n_tup_hot_upd"])


async def write_overhead(dsn: str, runs: int, seconds: float, clients: int) -> dict[str, Any]:
    """Throughput, WAL per job and HOT ratio of the queue's write path without and with indexes."""
    conn = await asyncpg.connect(dsn)
    results: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    try:
        sizes = {
            name: int(await conn.fetchval("SELECT pg_relation_size($1::regclass)", name))
            for name in EXPORTER_INDEXES
        }
        started = time.perf_counter()
        await drop_exporter_indexes(conn)
        await create_exporter_indexes(conn)
        build_seconds = time.perf_counter() - started
        # Alternate, so drift (table growth, autovacuum, cache) hits both sides alike.
        for _ in range(runs):
            for variant in ("without", "with"):
                if variant == "without":
                    await drop_exporter_indexes(conn)
                else:
                    await create_exporter_indexes(conn)
                await conn.execute("CHECKPOINT")
                wal0, upd0, hot0 = await _table_stats(conn)
                began = time.perf_counter()
                jobs = await _write_loop(dsn, seconds, clients)
                elapsed = time.perf_counter() - began
                # Backends flush their table statistics up to a second after they go idle.
                await asyncio.sleep(1.2)
                wal1, upd1, hot1 = await _table_stats(conn)
                updates = upd1 - upd0
                results[variant].append(
                    {
                        "jobs_per_s": jobs / elapsed,
                        "wal_bytes_per_job": (wal1 - wal0) / max(jobs, 1),
                        "hot_ratio": (hot1 - hot0) / updates if updates else 0.0,
                    }
                )
    finally:
        await create_exporter_indexes(conn)
        await conn.close()

    def summary(rows: list[dict[str, float]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("jobs_per_s", "wal_bytes_per_job", "hot_ratio"):
            values = [r[key] for r in rows]
            out[key] = median(values)
            out[key + "_range"] = [min(values), max(values)] if values else []
        return out

    without, with_ = summary(results["without"]), summary(results["with"])
    base = without["jobs_per_s"] or 1.0
    return {
        "runs": runs,
        "seconds_per_run": seconds,
        "clients": clients,
        "without": without,
        "with": with_,
        "throughput_overhead_pct": (base - with_["jobs_per_s"]) / base * 100,
        "wal_overhead_pct": (with_["wal_bytes_per_job"] / (without["wal_bytes_per_job"] or 1) - 1)
        * 100,
        "index_bytes": sizes,
        "index_build_seconds": build_seconds,
    }


# -- processes: the exporter and the fleet -----------------------------------------------


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
    code = "import asyncio, sys; from bench.measure import run_fleet; " + (
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


async def serving(
    url: str,
    clients: int,
    seconds: float,
    period: float | None = None,
    encoding: str = "identity",
) -> dict[str, Any]:
    """Latency of /metrics under ``clients`` concurrent scrapers for ``seconds``.

    Without ``period`` each scraper asks again as soon as it has its answer (closed loop: the
    server's saturation, where latency is clients / throughput); with it, each scrapes once
    per ``period`` seconds at a random phase, as that many Prometheus servers would. Each asks
    for ``encoding`` (Prometheus sends ``gzip``); bodies are timed and sized as sent, not
    decompressed, since Prometheus decompresses on its own side.
    """
    latencies: list[float] = []
    sizes: list[int] = []
    errors = 0
    deadline = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(
        connector=connector, headers={"Accept-Encoding": encoding}, auto_decompress=False
    ) as session:

        async def scraper() -> None:
            nonlocal errors
            if period is not None:
                await asyncio.sleep(random.uniform(0, period))
            while time.monotonic() < deadline:
                began = time.perf_counter()
                async with session.get(url) as resp:
                    body = await resp.read()
                    if resp.status != 200:
                        errors += 1
                latencies.append((time.perf_counter() - began) * 1000)
                sizes.append(len(body))
                if period is not None:
                    await asyncio.sleep(max(0.0, period - (time.perf_counter() - began)))

        began = time.perf_counter()
        await asyncio.gather(*(scraper() for _ in range(clients)))
        elapsed = time.perf_counter() - began
    return {
        "clients": clients,
        "seconds": seconds,
        "period": period,
        "encoding": encoding,
        "requests": len(latencies),
        "requests_per_s": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies, default=0.0),
        "errors": errors,
        "body_bytes": max(sizes, default=0),
    }


async def scrape_text(url: str) -> str:
    """One /metrics body."""
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return await resp.text()


def query_durations_from_metrics(text: str) -> dict[str, float]:
    """jobqueue_exporter_query_duration_seconds per query from an exposition, in milliseconds."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("jobqueue_exporter_query_duration_seconds{"):
            labels, _, value = line.rpartition(" ")
            name = labels.split('query="', 1)[1].split('"', 1)[0]
            found[name] = float(value) * 1000
    return found


def unique_name(prefix: str) -> str:
    """A database name nobody else uses."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def _wrk_ms(text: str) -> float:
    """A wrk latency like 812.00us, 3.21ms or 1.02s, in milliseconds."""
    for suffix, scale in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * scale
    return float(text)


def serving_wrk(url: str, clients: int, seconds: float) -> dict[str, Any] | None:
    """The same load from wrk (a C client, so the client's own cost stays out); None without wrk."""
    wrk = shutil.which("wrk")
    if wrk is None:
        return None
    done = subprocess.run(
        [wrk, "-t2", f"-c{clients}", f"-d{max(1, round(seconds))}s", "--latency", url],
        capture_output=True, text=True, check=False, timeout=seconds + 30,
    )  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-300:]}
    found: dict[str, Any] = {"clients": clients, "seconds": seconds}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("50%", "90%", "99%"):
            found[f"p{parts[0][:-1]}_ms"] = _wrk_ms(parts[1])
        elif line.startswith("Requests/sec:"):
            found["requests_per_s"] = float(parts[1])
        elif "requests in" in line:
            found["requests"] = int(parts[0])
        elif line.strip().startswith("Non-2xx"):
            found["errors"] = int(parts[-1])
    return found
