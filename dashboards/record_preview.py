"""Record the demo fleet's traffic into a kept Prometheus data directory, then render the preview.

    python dashboards/record_preview.py record --minutes 30 --data /tmp/preview-data
    python dashboards/record_preview.py render --data /tmp/preview-data --output docs/dashboard.png

``record`` runs a throwaway PostgreSQL, the simulated fleet (its errors, deadline kills, worker
deaths, duplicates and malformed results included), the exporter with its default 15 s
interval, and Prometheus scraping it every 15 s with the rendered rules; a third of the way
from the end it stops the database for half a lease (15 s): the blip a healthy queue rides
out, since a worker keeps its job and retries while its lease holds, so the error budgets show
the fleet's own failures rather than the outage's. ``render`` starts Prometheus on a copy of
the kept data (no scraping), backfills any recording rule of this checkout's rules that the run
did not record (a dashboard built later may read a new recorded series; promtool evaluates
each backfilled rule on the recorded data alone), and draws dashboards/jobqueue.json's panels
over the recorded span with render_preview.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import yaml

# Run as a script: the repository root is not on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dashboards import render_preview
from exporter.demo import DEMO_JOB_TYPES, Cluster, Fleet, FleetConfig, prepare_database
from exporter.demo.cluster import free_port
from exporter.rules import render_rules
from exporter.service import Service
from exporter.settings import AlertSettings, QueueSettings, Settings
from exporter.settings.schema import WebSettings
from tests.dashboard_checks import DASHBOARD_PATH
from tests.e2e_stack import PROMETHEUS_BINARY, Process, binary, stop_process

JOB = "jobqueue-exporter"
SCRAPE_INTERVAL = 15.0
# Half the demo fleet's lease. A worker renews every third of its lease, so at any moment at
# least two thirds of it remain: half a lease plus the server's stop and start still ends
# before any lease, and no job is reaped for the outage.
OUTAGE_SECONDS = FleetConfig().lease_seconds / 2
META = "preview-run.json"


def prometheus(data: Path, scrape_port: int | None, rules: str, *, admin: bool = False) -> Process:
    """Start Prometheus on data (scraping 127.0.0.1:scrape_port if given); wait until ready."""
    data.mkdir(parents=True, exist_ok=True)
    (data / "jobqueue.rules.yml").write_text(rules)
    scrape = {"job_name": JOB, "static_configs": [{"targets": [f"127.0.0.1:{scrape_port}"]}]}
    config = {
        "global": {
            "scrape_interval": f"{SCRAPE_INTERVAL:g}s",
            "evaluation_interval": f"{AlertSettings().evaluation_interval:g}s",
        },
        "rule_files": [str(data / "jobqueue.rules.yml")],
        "scrape_configs": [scrape] if scrape_port else [],
    }
    (data / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = data / "prometheus.log"
    with log_path.open("ab") as log:
        popen = subprocess.Popen(
            [
                binary(PROMETHEUS_BINARY),
                f"--config.file={data / 'prometheus.yml'}",
                f"--storage.tsdb.path={data / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                # The kept data is the point: no retention may drop it before a re-render.
                "--storage.tsdb.retention.time=10y",
                *(["--web.enable-admin-api"] if admin else []),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    process = Process("prometheus", popen, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise SystemExit(f"prometheus exited:\n{process.log_tail()}")
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(process.url + "/-/ready", timeout=2) as response,
        ):
            if response.status == 200:
                return process
        time.sleep(0.5)
    stop_process(process)
    raise SystemExit(f"prometheus not ready after 60 s:\n{process.log_tail()}")


def rules() -> str:
    """The shipped rules, selecting this run's scrape job."""
    return render_rules(replace(AlertSettings(), selector=f'job="{JOB}"'))


async def record(minutes: float, data: Path) -> None:
    """Run fleet, exporter and Prometheus for minutes, with one database outage; keep the data."""
    cluster = Cluster()
    await asyncio.to_thread(cluster.start)
    try:
        await asyncio.to_thread(cluster.create_database, "jobqueue")
        dsn = cluster.dsn("jobqueue")
        await prepare_database(dsn)
        queue = QueueSettings(name="jobqueue")
        queue = replace(
            queue,
            database=replace(queue.database, dsn=dsn),
            collect=replace(queue.collect, job_types=DEMO_JOB_TYPES),
        )
        settings = Settings(
            queues=(queue,),
            web=WebSettings(listen_address=("127.0.0.1:0",)),
        )
        service = Service(settings)
        fleet = Fleet(dsn, FleetConfig())
        await service.start()
        assert service.port is not None
        prom = prometheus(data, service.port, rules())
        start = time.time()
        try:
            await fleet.start()
            total = minutes * 60
            outage_at = total * 2 / 3
            await asyncio.sleep(outage_at)
            print(f"outage: stopping the database at {time.strftime('%H:%M:%S')}", flush=True)
            await asyncio.to_thread(cluster.stop)
            await asyncio.sleep(OUTAGE_SECONDS)
            await asyncio.to_thread(cluster.start)
            print(f"outage: database back at {time.strftime('%H:%M:%S')}", flush=True)
            await asyncio.sleep(max(0.0, total - outage_at - OUTAGE_SECONDS))
        finally:
            end = time.time()
            (data / META).write_text(json.dumps({"start": start, "end": end}) + "\n")
            await fleet.stop()
            await service.stop()
            stop_process(prom)
    finally:
        cluster.destroy()
    print(f"recorded {(end - start) / 60:.1f} min into {data}")


def recorded_names(url: str) -> set[str]:
    """Every metric name the kept data holds."""
    with urllib.request.urlopen(url + "/api/v1/label/__name__/values", timeout=30) as response:
        return set(json.load(response)["data"])


def missing_rules(text: str, present: set[str]) -> str | None:
    """The recording rules of text whose series the data lacks, as a rule file (None if none)."""
    groups = []
    for group in yaml.safe_load(text)["groups"]:
        wanted = [r for r in group["rules"] if "record" in r and r["record"] not in present]
        if wanted:
            groups.append({**group, "rules": wanted})
    return yaml.safe_dump({"groups": groups}) if groups else None


@contextlib.contextmanager
def kept_prometheus(data: Path) -> Iterator[str]:
    """Prometheus serving the kept data, with no scrape and no rule of its own."""
    process = prometheus(data, None, "groups: []\n")
    try:
        yield process.url
    finally:
        stop_process(process)


def persist_head(data: Path) -> None:
    """Turn the run's samples, still in the WAL, into a block (a TSDB snapshot).

    Prometheus truncates its head below the newest block on start, so backfilled blocks over
    the recorded span would drop every raw sample that only the WAL holds.
    """
    process = prometheus(data, None, "groups: []\n", admin=True)
    try:
        request = urllib.request.Request(process.url + "/api/v1/admin/tsdb/snapshot", method="POST")
        with urllib.request.urlopen(request, timeout=120) as response:
            name = json.load(response)["data"]["name"]
    finally:
        stop_process(process)
    snapshot = data / "snapshot"
    shutil.move(str(data / "tsdb" / "snapshots" / name), snapshot)
    shutil.rmtree(data / "tsdb")
    snapshot.rename(data / "tsdb")


def backfill(data: Path, start: float, end: float) -> None:
    """Evaluate the recording rules the run did not record over [start, end] into the data."""
    with kept_prometheus(data) as url:
        todo = missing_rules(rules(), recorded_names(url))
        if todo is None:
            return
        with tempfile.TemporaryDirectory() as scratch:
            rule_file = Path(scratch) / "missing.rules.yml"
            rule_file.write_text(todo)
            blocks = Path(scratch) / "blocks"
            subprocess.run(
                [
                    "promtool", "tsdb", "create-blocks-from", "rules",
                    f"--start={int(start)}", f"--end={int(end)}", f"--url={url}",
                    f"--output-dir={blocks}",
                    f"--eval-interval={AlertSettings().evaluation_interval:g}s",
                    str(rule_file),
                ],
                check=True,
            )  # fmt: skip
            for block in blocks.iterdir():
                shutil.move(str(block), data / "tsdb" / block.name)
    print(f"backfilled: {todo.count('record:')} recording rules")


def render(data: Path, output: Path, dashboard: Path) -> None:
    """Backfill what is missing, then draw the preview over the recorded span.

    Both happen on a copy of the data, so the kept run stays as recorded and each render
    backfills from the rules of its own checkout.
    """
    meta = json.loads((data / META).read_text())
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "data"
        shutil.copytree(data, copy, ignore=shutil.ignore_patterns("*.png", "*.log", "lock"))
        persist_head(copy)
        backfill(copy, meta["start"], meta["end"])
        with kept_prometheus(copy) as url:
            counts = render_preview.render_preview(
                url, meta["start"], meta["end"], output, SCRAPE_INTERVAL, dashboard
            )
    for title, count in counts.items():
        print(f"{count}\t{title}")
    print(f"wrote {output} ({(meta['end'] - meta['start']) / 60:.1f} min)")


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="run the demo fleet and keep Prometheus' data")
    rec.add_argument("--minutes", type=float, default=30.0)
    rec.add_argument("--data", type=Path, required=True)
    ren = sub.add_parser("render", help="draw the preview from kept data")
    ren.add_argument("--data", type=Path, required=True)
    ren.add_argument("--output", type=Path, default=Path("docs/dashboard.png"))
    ren.add_argument("--dashboard", type=Path, default=DASHBOARD_PATH)
    args = parser.parse_args(argv)
    if args.command == "record":
        asyncio.run(record(args.minutes, args.data))
        render(args.data, args.data / "dashboard.png", DASHBOARD_PATH)
    else:
        render(args.data, args.output, args.dashboard)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
