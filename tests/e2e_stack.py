"""Real Prometheus and Alertmanager processes, and a webhook receiver, for the end-to-end test.

Each process runs on a free loopback port in its own temporary directory and is ready once
its ``/-/ready`` answers 200; :func:`stop_process` ends it (TERM, then KILL) in ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from exporter.demo.cluster import free_port

ROOT = Path(__file__).resolve().parent.parent
ALERTMANAGER_EXAMPLE = ROOT / "alerts" / "alertmanager.yml"
PROMETHEUS_BINARY = "/usr/bin/prometheus"
ALERTMANAGER_BINARY = "/usr/bin/prometheus-alertmanager"
JOB_NAME = "jobqueue-exporter"
READY_TIMEOUT = 30.0
POLL = 0.5


class StackError(Exception):
    """A process of the stack did not start or answered with an error."""


@dataclass
class Process:
    """One started server: its process, base URL and log file (quoted when it fails)."""

    name: str
    popen: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the process's log, for failure messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def binary(path: str) -> str:
    """The path of a required binary; a missing one fails the test, it never skips it."""
    found = shutil.which(path)
    if found is None:
        raise StackError(
            f"{path} is not installed (Debian packages prometheus, prometheus-alertmanager)"
        )
    return found


def _spawn(name: str, args: list[str], workdir: Path, port: int) -> Process:
    log_path = workdir / f"{name}.log"
    with log_path.open("wb") as log:
        # The child keeps its own copy of the descriptor, so ours can be closed at once.
        popen = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=workdir)
    return Process(name, popen, f"http://127.0.0.1:{port}", log_path)


async def wait_ready(process: Process, session: aiohttp.ClientSession) -> None:
    """Poll ``/-/ready`` until it answers 200; fail with the log tail if the process dies."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise StackError(
                f"{process.name} exited with {process.popen.returncode}:\n{process.log_tail()}"
            )
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
            async with session.get(
                process.url + "/-/ready", timeout=aiohttp.ClientTimeout(total=2)
            ) as response:
                if response.status == 200:
                    return
        await asyncio.sleep(POLL)
    raise StackError(f"{process.name} not ready after {READY_TIMEOUT}s:\n{process.log_tail()}")


def stop_process(process: Process) -> None:
    """TERM, wait a little, then KILL; never leaves the child running."""
    if process.popen.poll() is None:
        process.popen.terminate()
        try:
            process.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.popen.kill()
            process.popen.wait(timeout=10)


def prometheus_config(
    exporter_port: int, alertmanager_port: int, rule_file: Path
) -> dict[str, Any]:
    """A Prometheus config scraping the exporter every second and alerting to one Alertmanager."""
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rule_file)],
        "alerting": {
            "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]}]
        },
        "scrape_configs": [
            {
                "job_name": JOB_NAME,
                "static_configs": [{"targets": [f"127.0.0.1:{exporter_port}"]}],
            }
        ],
    }


def start_prometheus(
    workdir: Path, exporter_port: int, alertmanager_port: int, rules_text: str
) -> Process:
    """Start Prometheus with the given rules on a free port (not yet waited on)."""
    workdir.mkdir(parents=True, exist_ok=True)
    rule_file = workdir / "jobqueue.rules.yml"
    rule_file.write_text(rules_text)
    config = workdir / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(prometheus_config(exporter_port, alertmanager_port, rule_file))
    )
    port = free_port()
    args = [
        binary(PROMETHEUS_BINARY),
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        # Re-send firing alerts every second, so Alertmanager never waits on the 1m default.
        "--rules.alert.resend-delay=1s",
        "--log.level=info",
    ]
    return _spawn("prometheus", args, workdir, port)


def alertmanager_config(
    source: dict[str, Any],
    webhook_url: str,
    *,
    group_wait: str = "1s",
    group_interval: str = "1s",
    repeat_interval: str = "1m",
) -> dict[str, Any]:
    """The example config with every webhook pointed at ``webhook_url``/<receiver> and short timers."""
    config = copy.deepcopy(source)
    for receiver in config.get("receivers", []):
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"{webhook_url}/{receiver['name']}"

    def shorten(route: dict[str, Any], top: bool) -> None:
        # Child routes inherit timers they do not set; only override where the example sets one.
        for key, value in (
            ("group_wait", group_wait),
            ("group_interval", group_interval),
            ("repeat_interval", repeat_interval),
        ):
            if top or key in route:
                route[key] = value
        for child in route.get("routes", []):
            shorten(child, False)

    shorten(config["route"], True)
    return config


def start_alertmanager(workdir: Path, webhook_url: str) -> Process:
    """Start Alertmanager with the shipped example config rewritten for the test (not waited on)."""
    workdir.mkdir(parents=True, exist_ok=True)
    source = yaml.safe_load(ALERTMANAGER_EXAMPLE.read_text())
    config = workdir / "alertmanager.yml"
    config.write_text(yaml.safe_dump(alertmanager_config(source, webhook_url), sort_keys=False))
    port = free_port()
    args = [
        binary(ALERTMANAGER_BINARY),
        f"--config.file={config}",
        f"--storage.path={workdir / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        # An empty address disables clustering, so nothing binds the default 9094.
        "--cluster.listen-address=",
        "--log.level=info",
    ]
    return _spawn("alertmanager", args, workdir, port)


@dataclass
class WebhookReceiver:
    """Records every alert Alertmanager posts, with the receiver (path) it went to."""

    url: str = ""
    alerts: list[dict[str, Any]] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        """Store the alerts of one notification."""
        body = await request.json()
        receiver = request.match_info["receiver"]
        for alert in body.get("alerts", []):
            self.alerts.append({**alert, "receiver": receiver})
        self.arrived.set()
        return web.Response(text="ok")

    def find(self, alertname: str, status: str = "firing", **labels: str) -> list[dict[str, Any]]:
        """Received alerts with this name, status and these labels."""
        return [
            a
            for a in self.alerts
            if a["labels"].get("alertname") == alertname
            and a["status"] == status
            and all(a["labels"].get(k) == v for k, v in labels.items())
        ]

    def summary(self) -> str:
        """One line per distinct received alert, for failure messages."""
        seen = sorted(
            {f"{a['status']} {a['receiver']} {sorted(a['labels'].items())}" for a in self.alerts}
        )
        return "\n".join(seen) or "(nothing received)"


@contextlib.asynccontextmanager
async def webhook_receiver() -> AsyncIterator[WebhookReceiver]:
    """An aiohttp server on a free loopback port collecting Alertmanager's webhook posts."""
    receiver = WebhookReceiver()
    app = web.Application()
    app.router.add_post("/hook/{receiver}", receiver.handle)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    receiver.url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    try:
        yield receiver
    finally:
        await runner.cleanup()


@contextlib.contextmanager
def processes() -> Iterator[list[Process]]:
    """A list to put started processes in; every one is stopped on the way out."""
    started: list[Process] = []
    try:
        yield started
    finally:
        for process in reversed(started):
            stop_process(process)


async def prometheus_query(
    session: aiohttp.ClientSession, base_url: str, expr: str, at: float | None = None
) -> list[dict[str, Any]]:
    """The result vector of an instant query; StackError when Prometheus reports an error."""
    params = {"query": expr}
    if at is not None:
        params["time"] = repr(at)
    async with session.get(f"{base_url}/api/v1/query", params=params) as response:
        body = await response.json()
    if body.get("status") != "success":
        raise StackError(f"query failed: {expr}: {body}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def prometheus_query_range(
    session: aiohttp.ClientSession, base_url: str, expr: str, start: float, end: float, step: float
) -> list[dict[str, Any]]:
    """The result matrix of a range query; StackError when Prometheus reports an error."""
    params = {"query": expr, "start": repr(start), "end": repr(end), "step": repr(step)}
    async with session.get(f"{base_url}/api/v1/query_range", params=params) as response:
        body = await response.json()
    if body.get("status") != "success":
        raise StackError(f"query_range failed: {expr}: {body}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result
