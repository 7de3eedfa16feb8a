"""A slot invalidated while the exporter was stopped pages: real PostgreSQL (wal_level=logical,
max_slot_wal_keep_size 1MB), the exporter's service, and a real Prometheus with the shipped
rules, until JobQueueLogicalGap fires on the series the exporter serves.

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

from exporter.demo.cluster import Cluster
from exporter.demo.queue import prepare_database
from exporter.rules import render_rules
from exporter.runtime import QueueRuntime
from exporter.service import Service
from exporter.settings import AlertSettings
from tests.conftest import execute
from tests.db.test_logical import PUBLICATION, drop_when_released
from tests.db.test_logical_gap import gap_queue, invalidate, streamed
from tests.e2e_stack import (
    JOB_NAME,
    processes,
    prometheus_query,
    start_prometheus,
    wait_ready,
)
from tests.helpers import fast_settings

pytestmark = [pytest.mark.e2e, pytest.mark.daemon, pytest.mark.logical]

ALERTS = dataclasses.replace(AlertSettings(), selector=f'job="{JOB_NAME}"', evaluation_interval=1)
NO_ALERTMANAGER = 9  # the discard port: the alert is read from Prometheus itself


async def test_a_slot_lost_while_the_exporter_was_stopped_fires_the_gap_alert(
    fresh_cluster: Cluster, tmp_path: Path
) -> None:
    fresh_cluster.psql("ALTER SYSTEM SET wal_level = logical")
    fresh_cluster.psql("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
    with (fresh_cluster.data_dir / "pg_hba.conf").open("a") as hba:
        hba.write("host replication all 127.0.0.1/32 trust\n")
    fresh_cluster.restart()
    fresh_cluster.create_database("queue")
    dsn = fresh_cluster.dsn("queue")
    await prepare_database(dsn)
    await execute(dsn, "ALTER TABLE job REPLICA IDENTITY FULL")
    await execute(dsn, f"CREATE PUBLICATION {PUBLICATION} FOR TABLE job")
    queue = gap_queue(dsn)
    slot = queue.collect.logical_slot
    assert slot is not None
    first = QueueRuntime(queue)  # an earlier exporter made and read the slot
    try:
        await streamed(first)
    finally:
        await first.stop()
        await first.database.close()
    await invalidate(dsn, slot)

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
