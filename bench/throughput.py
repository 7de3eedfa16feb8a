"""``python -m bench throughput``: the queue's state machine at a given rate, the exporter beside it.

pgbench drives enqueue, claim, renew and complete (one job per pgbench transaction, each step
its own transaction, ``synchronous_commit = off``) against a throwaway cluster, while the
exporter runs as its own process at the given interval. Sampling its /metrics, this prints the
rate reached, per-cycle collection time (median and max) and the slowest query, rows read
against rows changed, tracked jobs, RSS, CPU, whether the counters equal the table, and the
exporter's share of the database's statement time (bench/statements.py: pg_stat_statements,
the exporter under a role of its own). With ``--catch-up`` the exporter is stopped for a while
under load and restarted, to time how long it takes to absorb the backlog. ``--exporter-root`` runs another checkout (the previous design).
``--counting logical`` runs each rate under polling and then from the change stream, with each
mode's indexes, and adds WAL per job and the walsender's CPU (bench/logical.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
from prometheus_client.parser import text_string_to_metric_families

from bench import logical, statements
from bench.data import Shape, build_table
from bench.processes import ROOT, Process, unique_name, wait_ready
from exporter.counting.sqltext import render_queries
from exporter.demo.cluster import Cluster, free_port
from exporter.settings.table import TableMapping

# One job's life, each step its own transaction, as the queue's own code runs them. The claim
# takes the oldest ready job (priority, created_at) with SKIP LOCKED; a standing backlog of
# pending jobs keeps it from ever finding none.
SCRIPT = r"""
\set jt random(1, 8)
\set ms random(100, 9000)
INSERT INTO job (job_type, payload) VALUES (:jt, '{"product_code": "P"}');
UPDATE job SET status = 2, worker_id = 'w:client_id', lease_until = now() + interval '120 s',
       run_started_at = now(), attempts = attempts + 1, updated_at = now()
 WHERE job_id = (SELECT job_id FROM job WHERE status = 1 AND run_after <= now()
                 ORDER BY priority, created_at FOR UPDATE SKIP LOCKED LIMIT 1)
RETURNING job_id AS claimed \gset
UPDATE job SET lease_until = now() + interval '120 s', updated_at = now()
 WHERE job_id = ':claimed'::uuid AND worker_id = 'w:client_id' AND status = 2;
UPDATE job SET status = 3, lease_until = NULL, worker_id = NULL, updated_at = now(),
       result = jsonb_build_object('outcome', 'ok', 'metrics', jsonb_build_object(
           'duration_ms', :ms, 'cost', jsonb_build_object(
               'ai_usd', 0.012, 'proxy_usd', 0.003, 'total_usd', 0.016)))
 WHERE job_id = ':claimed'::uuid AND worker_id = 'w:client_id' AND status = 2;
"""
BACKLOG = 2000  # pending jobs standing in the queue
COUNTERS = ("jobqueue_jobs_enqueued_total", "jobqueue_jobs_completed_total")


@dataclass
class Samples:
    """What sampling the exporter's /metrics saw."""

    durations: list[float] = field(default_factory=list)  # one per finished collection
    scrapes: list[float] = field(default_factory=list)  # seconds each /metrics answer took
    max_query: dict[str, float] = field(default_factory=dict)
    tracked: int = 0
    rss: int = 0
    lag: float = 0.0
    failed: float = 0.0


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by name: [(labels, value)]."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def total(metrics: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    """Sum of a metric over its label sets (0 when absent)."""
    return sum(v for _, v in metrics.get(name, []))


async def scrape(session: aiohttp.ClientSession, port: int) -> dict[str, Any]:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
        return parse(await resp.text())


async def sample_loop(
    port: int, proc: Process, every: float, out: Samples, stop: asyncio.Event
) -> None:
    """Record each finished collection's duration and the peaks, until ``stop``."""
    seen = -1.0
    # A stopped exporter (--catch-up) answers nothing: a short timeout, and sample again.
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
        while not stop.is_set():
            started = time.monotonic()
            try:
                async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                    text = await resp.text()
                # A logical queue's answer waits for its slot's confirmation: this is its cost
                # (the parse below is the bench's own).
                out.scrapes.append(time.monotonic() - started)
                m = parse(text)
            except (aiohttp.ClientError, TimeoutError):
                m = {}
            if m:
                done = total(m, "jobqueue_exporter_collections_total")
                if done != seen and seen >= 0:
                    out.durations.append(total(m, "jobqueue_exporter_collection_duration_seconds"))
                    for labels, v in m.get("jobqueue_exporter_query_duration_seconds", []):
                        q = labels.get("query", "?")
                        out.max_query[q] = max(out.max_query.get(q, 0.0), v)
                seen = done
                out.tracked = max(out.tracked, int(total(m, "jobqueue_exporter_tracked_jobs")))
                out.lag = max(out.lag, total(m, "jobqueue_exporter_lag_seconds"))
                out.failed = total(m, "jobqueue_exporter_collection_errors_total")
            out.rss = max(out.rss, proc.rss_bytes())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)


def start_exporter(
    dsn: str, interval: str, root: Path, extra: tuple[str, ...] = ()
) -> tuple[Process, int]:
    """``python -m exporter run`` from ``root`` (this checkout, or another one)."""
    port = free_port()
    args = [
        sys.executable, "-m", "exporter", "run", f"--database.dsn={dsn}",
        f"--web.listen-address=127.0.0.1:{port}", f"--collect.interval={interval}",
        "--log.level=warn", *extra,
    ]  # fmt: skip
    return Process(args, cwd=root), port


def pgbench(dsn: str, rate: float | None, seconds: float, clients: int) -> subprocess.Popen[str]:
    """Start pgbench on the job script; None rate means as fast as it goes."""
    script = Path(tempfile.mkstemp(suffix=".sql")[1])
    script.write_text(SCRIPT)
    args = ["pgbench", "-n", "-f", str(script), "-c", str(clients), "-j", "2"]
    args += ["-T", str(int(seconds)), "-d", dsn]
    if rate:
        args += ["-R", str(rate)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


async def counts(dsn: str) -> tuple[int, int]:
    """(all rows, DONE rows): pgbench only inserts and completes, so deltas are the truth."""
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            "SELECT count(*) AS n, count(*) FILTER (WHERE status = 3) AS d FROM job"
        )
        return int(row["n"]), int(row["d"])
    finally:
        await conn.close()


async def changed_since(dsn: str, since: float) -> int:
    """Distinct rows changed after ``since`` (database Unix time): the least a reader must read."""
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(
            "SELECT count(*) FROM job WHERE updated_at > to_timestamp($1)", since))  # fmt: skip
    finally:
        await conn.close()


async def db_now(dsn: str) -> float:
    conn = await asyncpg.connect(dsn)
    try:
        return float(await conn.fetchval("SELECT extract(epoch FROM now())::float8"))
    finally:
        await conn.close()


async def loaded_database(cluster: Cluster, prefix: str, rows: int) -> tuple[str, str]:
    """A fresh database: ``rows`` rows of history and the standing backlog; (name, DSN)."""
    name = unique_name(prefix)
    cluster.create_database(name)
    dsn = cluster.dsn(name)
    cluster.psql(f"ALTER DATABASE {name} SET synchronous_commit = off")
    await build_table(dsn, Shape(rows))
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "INSERT INTO job (job_type, created_at, updated_at, run_after) "
            "SELECT 1 + i % 8, now() - interval '1 hour', now() - interval '1 hour', "
            "now() - interval '1 hour' FROM generate_series(1, $1) i", BACKLOG)  # fmt: skip
        await conn.execute("VACUUM ANALYZE job")
    finally:
        await conn.close()
    return name, dsn


async def run_one(
    cluster: Cluster, args: argparse.Namespace, rate: float | None, counting: str = "polling"
) -> dict[str, Any]:
    """One rate on a fresh database: load, measure, compare."""
    name, dsn = await loaded_database(cluster, "tp", args.rows)
    statements.prepare_database(cluster, name)
    root = Path(args.exporter_root) if args.exporter_root else ROOT
    # Under a role of its own, so pg_stat_statements tells its statements apart.
    exporter_dsn = cluster.dsn(name, user=statements.ROLE)
    if counting == "logical":
        logical.setup_logical(cluster, name, exporter_dsn)
    extra = tuple(logical.exporter_args(counting))
    exporter, port = start_exporter(exporter_dsn, args.interval, root, extra)
    samples = Samples()
    stop = asyncio.Event()
    result: dict[str, Any] = {"target_rate": rate, "rows": args.rows, "interval": args.interval,
                              "counting": counting}  # fmt: skip
    try:
        await wait_ready(port, exporter)
        if counting == "logical":
            await logical.wait_streaming(dsn)
        async with aiohttp.ClientSession() as session:
            before = await scrape(session, port)
        rows0, done0 = await counts(dsn)
        t0 = await db_now(dsn)
        every = max(0.25, min(1.0, _seconds(args.interval) / 4))
        sampler = asyncio.create_task(sample_loop(port, exporter, every, samples, stop))
        await statements.reset(dsn)
        cpu0, wall0 = exporter.cpu_seconds(), time.monotonic()
        wal0, sender0 = await logical.wal_lsn(dsn), await logical.walsender_cpu(dsn)
        bench = pgbench(dsn, rate, args.seconds, args.clients)
        if args.catch_up:
            await asyncio.sleep(args.seconds / 4)
            exporter.proc.send_signal(19)  # SIGSTOP: the exporter is "down", the load goes on
            await asyncio.sleep(args.catch_up)
            exporter.proc.send_signal(18)  # SIGCONT
            resumed = time.monotonic()
        out, _ = await asyncio.to_thread(bench.communicate)
        if bench.returncode != 0 or "aborted" in out:
            print(out[-3000:], file=sys.stderr)
        wall = time.monotonic() - wall0
        cpu = exporter.cpu_seconds() - cpu0
        wal, sender = await logical.wal_lsn(dsn) - wal0, await logical.walsender_cpu(dsn) - sender0
        result["statements"] = await statements.share(dsn, render_queries(TableMapping(name="job")))
        rows1, done1 = await counts(dsn)
        # Let the exporter read what is left: two collections after its lag is small.
        async with aiohttp.ClientSession() as session:
            for _ in range(600):
                m = await scrape(session, port)
                got = total(m, COUNTERS[1]) - total(before, COUNTERS[1])
                if (got >= done1 - done0
                        and total(m, "jobqueue_exporter_lag_seconds") < 2.0):  # fmt: skip
                    break
                await asyncio.sleep(0.5)
            caught = time.monotonic()
            after = await scrape(session, port)
        stop.set()
        await sampler
        changed = await changed_since(dsn, t0)
        tps = [float(x.split("=")[1].split()[0]) for x in out.splitlines() if x.startswith("tps")]
        jobs = done1 - done0
        counted = tuple(total(after, n) - total(before, n) for n in COUNTERS)
        read = total(after, "jobqueue_exporter_rows_read_total") - total(
            before, "jobqueue_exporter_rows_read_total"
        )
        result.update(
            jobs=jobs,
            jobs_per_s=jobs / wall,
            pgbench_tps=tps[0] if tps else None,
            collections=len(samples.durations),
            median_collection_s=statistics.median(samples.durations) if samples.durations else None,
            max_collection_s=max(samples.durations, default=None),
            median_scrape_s=statistics.median(samples.scrapes) if samples.scrapes else None,
            max_scrape_s=max(samples.scrapes, default=None),
            max_query_s=max(samples.max_query.values(), default=None),
            slowest_query=max(samples.max_query, key=samples.max_query.__getitem__, default=None),
            tracked_max=samples.tracked,
            rss_max_mib=samples.rss / 2**20,
            cpu_pct=100.0 * cpu / wall,
            changed_rows=changed,
            rows_read=read if read else None,
            read_per_changed=read / changed if read and changed else None,
            lag_max_s=samples.lag,
            failed_collections=samples.failed,
            enqueued=(counted[0], rows1 - rows0),
            completed=(counted[1], jobs),
            exact=counted == (rows1 - rows0, jobs),
        )
        logical.costs(result, cpu, wal, sender, wall)
        result["settled_s"] = caught - (wall0 + wall)  # load's end to the exact counts
        if args.catch_up:
            result["catch_up_down_s"] = args.catch_up
            result["catch_up_s"] = caught - max(resumed, wall0 + wall)
    finally:
        stop.set()
        exporter.stop()
        if counting == "logical":
            await logical.drop_slots(dsn)
    return result


def _seconds(text: str) -> float:
    return float(text[:-2]) / 1000 if text.endswith("ms") else float(text.rstrip("s"))


def render(results: list[dict[str, Any]]) -> str:
    """A Markdown table."""
    lines = [
        "| jobs/s (target) | jobs/s | collections | median / max collection | max query | "
        "rows read / changed | tracked jobs | RSS | CPU | counters |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        ratio = f"{r['read_per_changed']:.2f}" if r["read_per_changed"] else "n/a"
        med, mx = r["median_collection_s"] or 0.0, r["max_collection_s"] or 0.0
        exact = "exact" if r["exact"] else "**off**"
        lines.append(
            f"| {r['target_rate'] or 'max'} | {r['jobs_per_s']:,.0f} | {r['collections']} | "
            f"{med * 1000:,.1f} / {mx * 1000:,.1f} ms | "
            f"{(r['max_query_s'] or 0) * 1000:,.1f} ms ({r['slowest_query']}) | {ratio} | "
            f"{r['tracked_max']:,} | {r['rss_max_mib']:.0f} MiB | {r['cpu_pct']:.1f} % | "
            f"{exact} ({r['completed'][0]:,.0f} = {r['completed'][1]:,}) |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench throughput", description=__doc__)
    parser.add_argument("--rates", default="100,1000,max", help="jobs/s, comma-separated; max")
    parser.add_argument("--seconds", type=float, default=60.0, help="pgbench duration per rate")
    parser.add_argument("--interval", default="15s", help="the exporter's collect.interval")
    parser.add_argument("--rows", type=int, default=100_000, help="history rows in the table")
    parser.add_argument("--clients", type=int, default=8, help="pgbench clients")
    parser.add_argument("--catch-up", type=float, default=0.0,
                        help="stop the exporter this many seconds under load, then resume")  # fmt: skip
    parser.add_argument("--exporter-root", default="", help="run the exporter from this checkout")
    parser.add_argument("--counting", choices=("polling", "logical"), default="polling",
                        help="logical: each rate under polling, then from the change stream")  # fmt: skip
    parser.add_argument("--out", default="bench/out", help="directory for throughput.json")
    return parser.parse_args(argv)


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    cluster = Cluster()
    results = []
    try:
        cluster.start()
        if args.counting == "logical":
            logical.prepare_cluster(cluster)
        statements.prepare_cluster(cluster)
        modes = ("polling", "logical") if args.counting == "logical" else ("polling",)
        for text in args.rates.split(","):
            rate = None if text == "max" else float(text)
            for mode in modes:
                print(f"bench throughput: {text} jobs/s, {mode} ...", file=sys.stderr, flush=True)
                results.append(await run_one(cluster, args, rate, mode))
    finally:
        cluster.destroy()
    return results


def main(argv: list[str]) -> int:
    """Run each rate, print the table, write throughput.json."""
    args = parse_args(argv)
    results = asyncio.run(main_async(args))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "throughput.json").write_text(json.dumps(results, indent=2, default=str))
    print(render(results))
    print(logical.render(results))
    print(statements.render(results))
    for r in results:
        if "catch_up_s" in r:
            print(f"catch-up: down {r['catch_up_down_s']:.0f} s, caught up "
                  f"{r['catch_up_s']:.1f} s after the load ended or it resumed; "
                  f"max lag {r['lag_max_s']:.0f} s; failed collections {r['failed_collections']:.0f}")  # fmt: skip
    return 0
