"""The late-commit horizon's pure logic, and its refusal to count blind."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from exporter.counting.horizon import Horizon, IdWatermark, TxidSnapshot, widen_xid
from exporter.profiles.base import CountingError
from exporter.profiles.procrastinate import ProcrastinateReader
from tests.conftest import PgServer, dsn_with_database, execute
from tests.system.presets.processes import require


def _horizon(lower_bound: float, last_id: int, read_at: float, prepared: int = 0) -> Horizon:
    return Horizon(lower_bound=lower_bound, prepared=prepared, last_id=last_id, read_at=read_at)


def test_watermark_waits_for_the_oldest_open_transaction() -> None:
    cursor = IdWatermark()
    cursor.note(_horizon(lower_bound=10.0, last_id=5, read_at=10.1))
    assert cursor.lower_id() is None  # no point is older than the bound yet: no baseline
    # A transaction that began at 9.0 is still open: it may hold an id <= 5 or <= 8.
    cursor.note(_horizon(lower_bound=9.0, last_id=8, read_at=11.1))
    assert cursor.lower_id() is None
    cursor.note(_horizon(lower_bound=11.0, last_id=9, read_at=12.1))
    assert cursor.lower_id() == 5  # only the point read at 10.1 is before the bound
    cursor.watermark = cursor.lower_id()
    cursor.absorb([6, 7, 8, 9])
    cursor.advance()
    assert cursor.watermark == 5
    cursor.note(_horizon(lower_bound=12.0, last_id=12, read_at=13.1))
    assert cursor.fresh(10)
    assert cursor.fresh(11)
    assert not cursor.fresh(7)
    assert not cursor.fresh(10)
    cursor.advance()
    # The newest point read before the bound 12.0 was read at 11.1 with last_id 8.
    assert cursor.watermark == 8
    assert cursor.consumed == {9, 10, 11}
    assert cursor.points == [(12.1, 9), (13.1, 12)]


def test_prepared_transactions_freeze_the_watermark() -> None:
    cursor = IdWatermark(watermark=3)
    cursor.note(_horizon(lower_bound=1.0, last_id=5, read_at=0.5))
    cursor.note(_horizon(lower_bound=2.0, last_id=7, read_at=1.5, prepared=1))
    cursor.advance()
    assert cursor.watermark == 3
    assert cursor.settled() is None


def test_an_id_below_the_watermark_is_never_fresh() -> None:
    cursor = IdWatermark(watermark=100)
    assert not cursor.fresh(100)
    assert cursor.fresh(101)
    assert not cursor.fresh(101)


def test_snapshot_classifies_subtransactions_as_maybe_seen() -> None:
    snap = TxidSnapshot.parse("100:110:103,105")
    assert snap.xip == frozenset({103, 105})
    assert snap.surely_visible(99)
    assert snap.surely_invisible(110)
    assert snap.surely_invisible(105)
    # 104 may be a committed transaction or a subtransaction of 103: neither sure answer.
    assert not snap.surely_visible(104)
    assert not snap.surely_invisible(104)


def test_widen_xid_crosses_the_epoch() -> None:
    reference = (3 << 32) + 5  # epoch 3, low bits 5
    assert widen_xid(5, reference) == reference
    assert widen_xid(4, reference) == reference - 1
    assert widen_xid((1 << 32) - 2, reference) == (3 << 32) - 2  # epoch 2, just before the wrap


def test_hidden_sessions_are_refused() -> None:
    with pytest.raises(CountingError, match="pg_read_all_stats"):
        Horizon.from_row({"lower_bound": 1.0, "hidden": 2, "prepared": 0})


@pytest.mark.library
async def test_a_role_without_pg_read_all_stats_cannot_count(
    pg_cluster: PgServer, empty_dsn: str
) -> None:
    require("procrastinate")
    from tests.system.presets.procrastinate_harness import install

    install(empty_dsn)
    role = f"blind_{uuid.uuid4().hex[:8]}"
    admin = pg_cluster.admin_dsn
    await execute(admin, f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
    other = await asyncpg.connect(empty_dsn)  # postgres, in a transaction the role cannot see
    try:
        dbname = empty_dsn.rsplit("/", 1)[1]
        await execute(empty_dsn, f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
        blind_dsn = dsn_with_database(admin.replace("postgres@", f"{role}:pw@", 1), dbname)
        await other.execute("BEGIN")
        await other.execute("SELECT 1")
        reader = ProcrastinateReader()
        blind = await asyncpg.connect(blind_dsn)
        try:
            row = await blind.fetchrow(reader.horizon_query().sql)
        finally:
            await blind.close()
        assert row is not None
        with pytest.raises(CountingError):
            reader.queries(row)
    finally:
        await other.close()
        await execute(empty_dsn, f"DROP OWNED BY {role}")
        await execute(admin, f"DROP ROLE {role}")


def test_a_caching_id_sequence_is_refused() -> None:
    with pytest.raises(CountingError, match="cache"):
        Horizon.from_row({"lower_bound": 1.0, "hidden": 0, "prepared": 0, "id_cache": 20})
