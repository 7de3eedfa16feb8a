"""Prometheus' own probe paths, /-/healthy and /-/ready, answer exactly as /healthz and /readyz,
on a real exporter whose queue is ready or not (with basic auth: tests/db/test_app.py)."""

from __future__ import annotations

import uuid

import aiohttp

from exporter.service import Service
from exporter.settings import Settings
from tests.conftest import PgServer
from tests.helpers import fast_settings

PAIRS = (("/healthz", "/-/healthy"), ("/readyz", "/-/ready"))


async def _answers(port: int, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}{path}") as r:
        return r.status, await r.text()


async def _started(settings: Settings) -> Service:
    exporter = Service(settings)
    await exporter.start()
    assert exporter.port
    return exporter


async def test_prometheus_paths_answer_as_ours_when_ready(db_dsn: str) -> None:
    exporter = await _started(fast_settings(db_dsn))
    try:
        await exporter.queues[0].poller.wait_for_success()
        assert exporter.port
        for ours, prometheus in PAIRS:
            assert await _answers(exporter.port, prometheus) == await _answers(exporter.port, ours)
        assert await _answers(exporter.port, "/-/healthy") == (200, "ok\n")
        assert await _answers(exporter.port, "/-/ready") == (200, "ready\n")
    finally:
        await exporter.stop()


async def test_prometheus_paths_answer_as_ours_when_not_ready(pg_cluster: PgServer) -> None:
    missing = pg_cluster.dsn(f"no_such_database_{uuid.uuid4().hex[:8]}")
    exporter = await _started(fast_settings(missing))
    try:
        await exporter.queues[0].poller.wait_for_collections(2)
        assert exporter.port
        for ours, prometheus in PAIRS:
            assert await _answers(exporter.port, prometheus) == await _answers(exporter.port, ours)
        status, body = await _answers(exporter.port, "/-/ready")
        assert status == 503
        assert body.startswith("queue test: not ready: ")
        assert await _answers(exporter.port, "/-/healthy") == (200, "ok\n")
    finally:
        await exporter.stop()
