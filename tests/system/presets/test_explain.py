"""On about 1,000,000 rows of history, no per-cycle query of a preset scans a big table."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from tests.system.presets.explain import ROWS, Measurement
from tests.system.presets.processes import require

pytestmark = [pytest.mark.slow, pytest.mark.library]


async def _procrastinate(dsn: str) -> Measurement:
    require("procrastinate")
    from tests.system.presets import procrastinate_harness
    from tests.system.presets.explain import measure_procrastinate

    return await measure_procrastinate(dsn, procrastinate_harness.install)


async def _pgqueuer(dsn: str) -> Measurement:
    require("pgqueuer")
    from tests.system.presets import pgqueuer_harness
    from tests.system.presets.explain import measure_pgqueuer

    return await measure_pgqueuer(dsn, pgqueuer_harness.install)


async def _pgboss(dsn: str) -> Measurement:
    require("pg-boss")
    from tests.system.presets import pgboss_harness
    from tests.system.presets.explain import measure_pgboss

    return await measure_pgboss(dsn, pgboss_harness)


@pytest.mark.parametrize(
    "measure", [_procrastinate, _pgqueuer, _pgboss], ids=["procrastinate", "pgqueuer", "pgboss"]
)
async def test_per_cycle_queries_use_indexes_on_a_million_rows(
    empty_dsn: str, measure: Callable[[str], Awaitable[Measurement]]
) -> None:
    result = await measure(empty_dsn)
    assert result.plans, "no plan was captured"
    assert result.seq_scans() == [], result.summary()
    # What a cycle reads follows the backlog and the new work, never the history.
    assert max(result.rows_read) < ROWS // 50, result.summary()
    print(result.summary())
