"""Oban (Python 0.7's schema and SQL): the preset's counters equal the library's own record,
and a cycle stays on the indexes at 1,000,000 rows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.profiles.oban import ObanReader
from exporter.service import Service
from tests.system.presets.exported import RecordedPoller, assert_histograms, nonzero
from tests.system.presets.oban_client import Ack, ObanClient, insert_on, load, require_oban
from tests.system.presets.statediff_contract import assert_keeps_the_contract

pytestmark = [pytest.mark.slow, pytest.mark.library]


@pytest.fixture
async def oban_dsn(empty_dsn: str) -> str:
    """A database with Oban's schema, made by the library's own install.sql."""
    require_oban()
    async with ObanClient(empty_dsn) as oban:
        await oban.install()
    return empty_dsn


async def test_the_oban_statements_keep_the_state_diff_row_contract(oban_dsn: str) -> None:
    await assert_keeps_the_contract(oban_dsn, ObanReader())


async def test_counters_and_gauges_equal_the_oban_table(oban_dsn: str) -> None:
    from tests.system.presets import oban_harness as h

    async with ObanClient(oban_dsn) as oban:
        ids = await h.history(oban)
        start = await h.snapshot_rows(oban_dsn)
        poller = RecordedPoller(oban_dsn, "oban", heartbeat_timeout=h.RESCUE_AFTER)
        stuck_seen: list[float] = []

        async def while_stuck(n: int) -> None:
            await poller.until(lambda: poller.stuck(h.W + "Fragile") == n, within=20)
            stuck_seen.append(poller.stuck(h.W + "Fragile"))

        async def until_forgotten(job_id: int) -> None:
            await poller.until(lambda: job_id not in poller.reader(ObanReader).known, within=20)

        async with poller.running():
            by_hand = await h.run_workload(oban_dsn, oban, ids, while_stuck, until_forgotten)
            await poller.cycles(3)
    truth = h.truth(start, await h.snapshot_rows(oban_dsn), by_hand)

    assert len([e for e in poller.exports if e.counting]) >= 6, "too few cycles to prove much"
    # The table records what the workload did (so the truth is not vacuous) ...
    ok, flaky, bad, fragile = (h.W + name for name in ("Ok", "Flaky", "Bad", "Fragile"))
    assert truth.counters["enqueued"][ok] == 8
    # Three live; from the history, the one waiting for its retry and the one retried by hand.
    assert truth.counters["completed"][flaky] == 5
    assert truth.counters["failures"][(flaky, "error")] == 6
    assert truth.counters["failures"][(h.W + "Slow", "deadline")] == 1
    assert truth.counters["dead"] == {(bad, "error"): 2, (h.W + "Slow", "deadline"): 1,
                                      (fragile, "lease_expired"): 1}  # fmt: skip
    assert truth.counters["failures"][(fragile, "lease_expired")] == 2
    assert truth.counters["cancelled"] == {h.W + "Canceller": 1, h.W + "Held": 1}
    assert truth.counters["requeued"] == {flaky: 1}  # the retry by hand
    # ... and the exporter, polling all along, agrees with it exactly.
    assert poller.tallies.counters() == truth.counters
    assert_histograms(poller.tallies, truth.histograms, within=1e-6)
    assert poller.tallies.latency[h.W + "Later"].total >= 2.0  # it waited for its time
    assert stuck_seen == [2]
    last = poller.last.gauges
    got = {w: {"pending": g.pending, "running": g.running, "scheduled": g.scheduled}
           for w, g in last.items()}  # fmt: skip
    assert nonzero(got) == nonzero(truth.gauges)
    assert truth.gauges == {h.W + "Parked": {"pending": 2, "running": 0, "scheduled": 0},
                            h.W + "Held": {"pending": 1, "running": 0, "scheduled": 1}}  # fmt: skip
    assert last[h.W + "Parked"].oldest_ready_wait > 0
    assert last[h.W + "Held"].oldest_ready_wait == 0  # not due for an hour
    assert all(g.stuck == 0 and g.running_oldest == 0 for g in last.values())


async def test_late_insert_and_late_completion_are_counted_once(oban_dsn: str) -> None:
    import psycopg
    from psycopg.rows import dict_row

    poller = RecordedPoller(oban_dsn, "oban", interval=0.2)
    tallies = poller.tallies
    async with (
        ObanClient(oban_dsn) as oban,
        await psycopg.AsyncConnection.connect(oban_dsn, row_factory=dict_row) as late,
        poller.running(),
    ):
        await oban.insert("app.Later")
        await poller.until(lambda: tallies.enqueued["app.Later"] == 1)
        # One open transaction (its now(), hence every stamp it writes, is from here on)
        # inserts twice, once in a savepoint, and claims and completes the first job.
        await insert_on(late, "app.Parked")
        await late.execute("SAVEPOINT s")
        await insert_on(late, "app.Parked")
        await late.execute("RELEASE SAVEPOINT s")
        cursor = await late.execute(
            load("fetch_jobs.sql"), {"queue": "default", "demand": 1,
                                     "attempted_by": ["late", "late"]},
        )  # fmt: skip
        [job] = await cursor.fetchall()
        assert job["worker"] == "app.Later"
        acked = await late.execute(load("ack_job.sql"), Ack(job, "completed").args())
        assert [row["id"] for row in await acked.fetchall()] == [job["id"]]
        await oban.insert("app.Later")  # a prompt one, committed at once
        await poller.until(lambda: tallies.enqueued["app.Later"] == 2)
        await poller.cycles(5)
        assert tallies.enqueued["app.Parked"] == 0
        assert tallies.completed["app.Later"] == 0
        await late.commit()
        await poller.until(lambda: tallies.completed["app.Later"] >= 1)
        # A write rolled back is never counted.
        await insert_on(late, "app.Gone")
        await poller.cycles(3)
        await late.rollback()
        await poller.cycles(5)
    assert tallies.counters()["enqueued"] == {"app.Later": 2, "app.Parked": 2}
    assert tallies.counters()["completed"] == {"app.Later": 1}


async def test_per_cycle_queries_use_indexes_on_a_million_rows(oban_dsn: str) -> None:
    from tests.system.presets.explain import assert_stays_on_indexes
    from tests.system.presets.oban_explain import measure_oban

    result = await measure_oban(oban_dsn)
    assert_stays_on_indexes(result)
    print(result.summary())


async def test_the_exporter_service_serves_the_oban_queue_exactly(oban_dsn: str) -> None:
    """The same workload under `jobqueue-exporter run`'s Service: /metrics equals the table."""
    from exporter.settings import Settings, WebSettings
    from tests.helpers import fast_queue, get, parse, wait_until
    from tests.system.presets import oban_harness as h
    from tests.system.presets.test_exporter import counters_of

    queue = replace(fast_queue(oban_dsn, name="media", interval=0.3,
                               heartbeat_timeout=h.RESCUE_AFTER), profile="oban")  # fmt: skip
    service = Service(Settings(queues=(queue,), web=WebSettings(listen_address=("127.0.0.1:0",))))
    async with ObanClient(oban_dsn) as oban:
        ids = await h.history(oban)
        start = await h.snapshot_rows(oban_dsn)
        await service.start()
        try:
            mode = service.queue("media").poller.mode
            assert isinstance(mode, ObanReader)
            reader = mode
            await wait_until(lambda: reader.counting, within=60, what="the Oban baseline")

            async def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
                status, body, _ = await get(service.port, "/metrics")
                assert status == 200
                return parse(body)

            async def while_stuck(n: int) -> None:
                key = ("jobqueue_stuck_jobs", (("job_type", h.W + "Fragile"), ("queue", "media"),
                                               ("reason", "lease_expired")))  # fmt: skip
                while (await scrape()).get(key) != n:
                    await _next_collection(service)

            async def until_forgotten(job_id: int) -> None:
                await wait_until(lambda: job_id not in reader.known, within=30, what="forgotten")

            by_hand = await h.run_workload(oban_dsn, oban, ids, while_stuck, until_forgotten)
            truth = h.truth(start, await h.snapshot_rows(oban_dsn), by_hand)
            wanted = {name: {k: float(v) for k, v in found.items()}
                      for name, found in truth.counters.items() if found}  # fmt: skip
            for _ in range(100):
                got = {k: v for k, v in counters_of(await scrape(), "media").items() if v}
                if got == wanted:
                    break
                await _next_collection(service)
            assert got == wanted
            samples = await scrape()
            assert samples[("jobqueue_up", (("queue", "media"),))] == 1
            for worker, (n, *_sums) in truth.histograms.items():
                key = ("jobqueue_job_duration_seconds_count",
                       (("job_type", worker), ("queue", "media")))  # fmt: skip
                assert samples[key] == n, worker
        finally:
            await service.stop()


async def _next_collection(service: Service) -> None:
    poller = service.queue("media").poller
    await poller.wait_for_collections(poller.generation + 1, limit=30)
