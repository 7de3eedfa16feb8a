"""A slot invalidated while the exporter was stopped pages: real PostgreSQL (the session's
wal_level=logical cluster, max_slot_wal_keep_size 1MB for this module), the exporter's service
as its documented role, and a real Prometheus with the shipped rules, until JobQueueLogicalGap
fires on the series the exporter serves.

Run alone with ``pytest -m e2e tests/system/test_logical_gap_alert.py`` (about 90 s: the alert's
``for:`` is a minute).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import aiohttp
import pytest

from exporter.rules import render_rules
from exporter.runtime import QueueRuntime
from exporter.service import Service
from exporter.settings import AlertSettings
from tests.db.test_logical import drop_when_released
from tests.db.test_logical_gap import gap_queue, invalidate, streamed
from tests.e2e_stack import (
    JOB_NAME,
    processes,
    prometheus_query,
    start_prometheus,
    wait_ready,
)
from tests.helpers import fast_settings
from tests.logical_cluster import LogicalDatabase, LogicalServer

pytestmark = [pytest.mark.e2e, pytest.mark.logical, pytest.mark.daemon, pytest.mark.slow]

ALERTS = dataclasses.replace(AlertSettings(), selector=f'job="{JOB_NAME}"', evaluation_interval=1)
NO_ALERTMANAGER = 9  # the discard port: the alert is read from Prometheus itself


async def test_a_slot_lost_while_the_exporter_was_stopped_fires_the_gap_alert(
    logical_server: LogicalServer, logical_db: LogicalDatabase, tmp_path: Path
) -> None:
    with logical_server.configured({"max_slot_wal_keep_size": "1MB", "wal_keep_size": "0"}):
        await _gap_fires_the_alert(logical_db, tmp_path)


async def _gap_fires_the_alert(db: LogicalDatabase, tmp_path: Path) -> None:
    dsn = db.dsn  # the exporter's role; the admin writes the WAL that loses the slot
    queue = gap_queue(dsn)
    slot = queue.collect.logical_slot
    assert slot is not None
    first = QueueRuntime(queue)  # an earlier exporter made and read the slot
    try:
        await streamed(first)
    finally:
        await first.stop()
        await first.database.close()
    await invalidate(db.admin, slot)

    exporter = Service(dataclasses.replace(fast_settings(dsn), queues=(queue,)))
    async with aiohttp.ClientSession() as http:
        with processes() as started:
            await exporter.start()
            try:
                assert exporter.port is not None
                prometheus = start_prometheus(
                    tmp_path / "prometheus", exporter.port, NO_ALERTMANAGER, render_rules(ALERTS)
                )
                started.append(prometheus)
                await wait_ready(prometheus, http)
                firing = 'ALERTS{alertname="JobQueueLogicalGap", alertstate="firing"}'
                deadline = time.monotonic() + 120
                while not await prometheus_query(http, prometheus.url, firing):
                    assert time.monotonic() < deadline, "JobQueueLogicalGap never fired"
                    await asyncio.sleep(1.0)
                gaps = await prometheus_query(
                    http, prometheus.url, "jobqueue_exporter_logical_gaps_total"
                )
                assert [float(s["value"][1]) for s in gaps] == [1.0]
                up = await prometheus_query(http, prometheus.url, "jobqueue_up")
                assert [float(s["value"][1]) for s in up] == [1.0]  # it kept serving
            finally:
                await exporter.stop()
    await drop_when_released(dsn, slot)
