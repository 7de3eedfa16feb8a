"""River (its own SQL, migration line main 007, and its Python client riverqueue 0.7.0): the
preset's counters equal the harness's record of what River did, the gauges equal the table,
and a cycle stays on River's indexes at 1,000,000 rows."""

from __future__ import annotations

import pytest

from exporter.profiles.river import RiverReader
from tests.conftest import execute
from tests.system.presets.exported import RecordedPoller, assert_histograms, nonzero
from tests.system.presets.river_client import Clock, Result, RiverSQL, require_riverqueue
from tests.system.presets.statediff_contract import assert_keeps_the_contract

pytestmark = [pytest.mark.library, pytest.mark.slow]
# The sessions of this database read and write in a zone far from UTC: River's timestamps are
# timestamptz, and nothing the preset reads may depend on the session's TimeZone.
TIMEZONE = "Pacific/Kiritimati"


@pytest.fixture
async def river_dsn(empty_dsn: str) -> str:
    """A database with River's schema, made by its own migrations 001-007."""
    require_riverqueue()
    name = empty_dsn.rsplit("/", 1)[1].split("?", 1)[0]
    await execute(empty_dsn, f"ALTER DATABASE \"{name}\" SET TimeZone TO '{TIMEZONE}'")
    async with RiverSQL(empty_dsn) as river:
        await river.migrate()
        zone = await river.run("QueueCreateOrSetUpdatedAt", {"now": None, "metadata": "{}",
                               "name": "probe", "paused_at": None, "updated_at": None})  # fmt: skip
        assert str(zone[0]["created_at"].tzinfo) == TIMEZONE  # the sessions really are there
    return empty_dsn


async def test_the_river_statements_keep_the_state_diff_row_contract(river_dsn: str) -> None:
    await assert_keeps_the_contract(river_dsn, RiverReader())


async def test_counters_and_gauges_equal_what_river_did(river_dsn: str) -> None:
    from tests.system.presets import river_workload as w
    from tests.system.presets.river_harness import RESCUE_AFTER
    from tests.system.presets.river_ledger import Log

    log = Log()
    async with RiverSQL(river_dsn) as river:
        inserts = w.Inserts(river, log)
        try:
            ids = await w.history(river, inserts, log)
            poller = RecordedPoller(river_dsn, "river", heartbeat_timeout=RESCUE_AFTER)
            stuck_seen: list[dict[str, float]] = []

            async def while_stuck(wanted: dict[str, int]) -> None:
                await poller.until(lambda: _stuck(poller, wanted) == wanted, within=30)
                stuck_seen.append(_stuck(poller, wanted))

            async with poller.running():
                log.live = True
                verdicts = await w.run_workload(river, inserts, log, ids, while_stuck)
                await poller.cycles(3)
        finally:
            await inserts.close()
    rows = await w.table(river_dsn)
    log.agree(rows)  # the log and River's design say what the table holds
    truth = log.truth()

    assert len([e for e in poller.exports if e.counting]) >= 10, "too few cycles to prove much"
    # The workload did what it says (so the truth is not vacuous) ...
    assert sum(truth["enqueued"].values()) == 381  # 360 of the mix, 12 later, 9 by hand
    assert truth["enqueued"]["ok"] > 100
    assert sorted(verdicts) == ["cancelled", "discarded", "retryable", "retryable"]
    assert truth["dead"][("fragile", "lease_expired")] == 1
    assert truth["failures"][("fragile", "lease_expired")] == 2  # the third was cancelled
    assert truth["failures"][("ok", "lease_expired")] == 1  # its result died in the completer
    assert truth["failures"][("flaky", "error")] >= 5
    assert truth["dead"][("bad", "error")] >= 1
    assert truth["cancelled"]["canceller"] >= 1
    assert truth["cancelled"]["slow"] == truth["cancelled"]["oops"] == 1
    assert truth["failures"][("oops", "error")] == 1  # its error came before the cancel
    assert truth["requeued"] == {"flaky": 1}
    assert truth["completed"]["snoozer"] >= 2
    for event in ("cleaned", "available->available error", "retryable->retryable error",
                  "available->available", "scheduled->scheduled", "cancel asked of a running job",
                  "retryable->cancelled error"):  # fmt: skip
        assert log.events["live " + event] >= 1, (event, log.events)
    assert log.deleted > 20  # the JobCleaner deleted finished rows while the exporter read
    # ... and the exporter, polling all along, agrees with it exactly.
    assert poller.tallies.counters() == truth
    assert_histograms(poller.tallies, log.histograms, within=1e-5)
    assert stuck_seen == [{"fragile": 3, "ok": 1}]
    # At a quiet moment the gauges are the table's.
    last = poller.last.gauges
    got = {k: {"pending": g.pending, "running": g.running, "scheduled": g.scheduled}
           for k, g in last.items()}  # fmt: skip
    assert nonzero(got) == nonzero(w.gauges(rows))
    assert nonzero(got) == {"parked": {"pending": 2, "running": 0, "scheduled": 0},
                            "later": {"pending": 1, "running": 0, "scheduled": 1},
                            "slowretry": {"pending": 1, "running": 0, "scheduled": 1}}  # fmt: skip
    assert last["parked"].oldest_ready_wait > 0
    assert last["parked"].oldest_pending_age >= last["parked"].oldest_ready_wait
    assert last["later"].oldest_ready_wait == 0  # not due for an hour
    assert all(g.stuck == 0 and g.running_oldest == 0 for g in last.values())


def _stuck(poller: RecordedPoller, kinds: dict[str, int]) -> dict[str, float]:
    return {kind: poller.gauge(kind, "stuck") for kind in kinds}


async def test_a_late_insert_and_a_completion_in_the_apps_transaction_count_once(
    river_dsn: str,
) -> None:
    """riverqueue's insert_tx and River's JobCompleteTx in one application transaction held
    open across cycles, while other jobs commit: counted once, when it commits."""
    from psycopg import AsyncConnection
    from psycopg.rows import dict_row

    from tests.system.presets import river_workload as w
    from tests.system.presets.river_ledger import Log

    poller = RecordedPoller(river_dsn, "river", interval=0.2)
    tallies = poller.tallies
    log = Log(live=True)
    async with RiverSQL(river_dsn) as river:
        inserts = w.Inserts(river, log)
        try:
            async with (
                await AsyncConnection.connect(river_dsn, row_factory=dict_row) as app,
                poller.running(),
            ):
                await inserts.one("prompt")
                await poller.until(lambda: tallies.enqueued["prompt"] == 1)
                # The app's transaction: a job worked inside it and completed with
                # JobCompleteTx (finalized_at from the app's clock, 30 s behind), then an
                # insert through riverqueue on the same connection's transaction.
                [job] = await river.fetch("default", "app", 1, app)
                await river.set_states([Result(job, "completed", Clock(-30.0).now())], app)
                await app.execute("SELECT pg_sleep(0)")  # still in the transaction
                await inserts.one("prompt")  # committed at once by another session
                await poller.until(lambda: tallies.enqueued["prompt"] == 2)
                await poller.cycles(5)
                assert tallies.completed["prompt"] == 0
                await app.commit()
                await poller.until(lambda: tallies.completed["prompt"] == 1)
                await inserts.held(["gone"], hold=1.0, commit=False)  # rolled back: never counted
                await poller.cycles(5)
        finally:
            await inserts.close()
    assert tallies.counters()["enqueued"] == {"prompt": 2}
    assert tallies.counters()["completed"] == {"prompt": 1}


async def test_a_completion_written_long_after_its_workers_stamp_is_counted(river_dsn: str) -> None:
    """A job seen running whose completer wrote its result two minutes after stamping it (River
    retries a failed flush with a backoff): its stamp is far below every window, and the
    reader still counts it, from the lookup of the jobs it last saw running."""
    poller = RecordedPoller(river_dsn, "river", interval=0.2)
    tallies = poller.tallies
    async with RiverSQL(river_dsn) as river, poller.running():
        await river.insert_many([{"kind": "held"}], Clock())
        async with river.pool.connection() as conn:
            [job] = await river.fetch("default", "w", 1, conn)
            await poller.until(lambda: poller.gauge("held", "running") == 1)
            await poller.cycles(3)  # the id watermark passes it: only the lookup can return it
            stamped = Clock(-120.0).now()  # when the job ended, on a clock that agrees
            await river.set_states([Result(job, "completed", stamped)], conn)
        await poller.until(lambda: poller.gauge("held", "running") == 0)
        await poller.cycles(3)
    assert tallies.counters()["completed"] == {"held": 1}
    assert tallies.duration["held"].count == 1


async def test_per_cycle_queries_use_indexes_on_a_million_rows(river_dsn: str) -> None:
    from tests.system.presets.explain import assert_stays_on_indexes
    from tests.system.presets.river_explain import measure_river

    result = await measure_river(river_dsn)
    assert_stays_on_indexes(result)
    print(result.summary())
