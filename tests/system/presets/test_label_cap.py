"""A preset's job types past collect.max_job_types fold into "other" on /metrics, counters and
gauges alike, through the exporter's own Poller (the label cap is no part of a reader)."""

from __future__ import annotations

import asyncpg
import pytest

from exporter.vocabulary import OTHER
from tests.system.presets.exported import RecordedPoller
from tests.system.presets.processes import require
from tests.system.presets.test_late_commit import _pgqueuer_enqueue, _procrastinate_defer

pytestmark = [pytest.mark.slow, pytest.mark.library]
CAP = 2


@pytest.mark.parametrize("profile", ["procrastinate", "pgqueuer"])
async def test_job_types_past_the_cap_fold_into_other(empty_dsn: str, profile: str) -> None:
    require(profile)
    if profile == "procrastinate":
        from tests.system.presets.procrastinate_harness import install

        enqueue = _procrastinate_defer
    else:
        from tests.system.presets.pgqueuer_harness import install

        enqueue = _pgqueuer_enqueue
    install(empty_dsn)
    poller = RecordedPoller(empty_dsn, profile, interval=0.2, max_job_types=CAP)
    conn = await asyncpg.connect(empty_dsn)
    try:
        async with poller.running():
            # First seen first: "mail" and "report" take the two labels, the rest fold.
            for task in ("mail", "mail", "report", "resize", "thumbnail", "thumbnail"):
                await enqueue(conn, task)
            await poller.until(lambda: sum(poller.tallies.enqueued.values()) == 6)
            await poller.cycles(2)
    finally:
        await conn.close()
    assert +poller.tallies.enqueued == {"mail": 2, "report": 1, OTHER: 3}
    gauges = poller.last.gauges
    assert set(gauges) == {"mail", "report", OTHER}
    assert {label: g.pending for label, g in gauges.items()} == {
        "mail": 2,
        "report": 1,
        OTHER: 3,
    }
    folded = poller.poller.labels.folded
    assert len(folded) == 2, folded  # resize and thumbnail, each counted under "other"
