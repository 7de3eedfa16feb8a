"""A preset reader's held state is gauged and capped like the default profile's tracker."""

from __future__ import annotations

from collections.abc import Callable

import asyncpg
import pytest

from tests.system.presets.exported import Export, RecordedPoller
from tests.system.presets.test_late_commit import Enqueue, _pgqueuer, _procrastinate

pytestmark = pytest.mark.library

CAP = 3  # collect.max_held_jobs: fewer than the events written while the horizon is held


def _health(export: Export, name: str) -> float | None:
    found = [value for (metric, _), value in export.samples.items() if metric == name]
    return found[0] if found else None


@pytest.mark.parametrize("preset", [_procrastinate, _pgqueuer], ids=["procrastinate", "pgqueuer"])
async def test_event_ids_held_by_a_long_transaction_are_gauged_and_capped(
    empty_dsn: str, preset: Callable[[str], tuple[str, Enqueue]]
) -> None:
    profile, enqueue = preset(empty_dsn)
    poller = RecordedPoller(empty_dsn, profile, interval=0.2, max_held_jobs=CAP)
    late = await asyncpg.connect(empty_dsn)
    prompt = await asyncpg.connect(empty_dsn)
    try:
        async with poller.running():
            await poller.cycles(3)
            assert _health(poller.last, "jobqueue_exporter_held_jobs") == 0
            assert _health(poller.last, "jobqueue_exporter_held_cap_exceeded") == 0
            transaction = late.transaction()
            await transaction.start()
            await enqueue(late, "late")  # a writer open since before the prompt events
            for _ in range(CAP + 2):
                await enqueue(prompt, "prompt")
            await poller.until(lambda: poller.tallies.enqueued["prompt"] == CAP + 2)
            await poller.cycles(3)
            # Counted at once, and each id kept above the watermark the open writer holds.
            held = _health(poller.last, "jobqueue_exporter_held_jobs")
            assert held is not None
            assert held >= CAP + 2
            assert _health(poller.last, "jobqueue_exporter_tracked_jobs") == held
            assert _health(poller.last, "jobqueue_exporter_held_cap_exceeded") == 1
            assert poller.poller.view().held is not None
            await transaction.commit()
            await poller.until(
                lambda: _health(poller.last, "jobqueue_exporter_held_cap_exceeded") == 0
            )
            await poller.until(lambda: _health(poller.last, "jobqueue_exporter_held_jobs") == 0)
        # Past the cap counting stayed exact: every event once.
        assert poller.tallies.enqueued == {"late": 1, "prompt": CAP + 2}
    finally:
        await late.close()
        await prompt.close()


async def test_finished_oban_jobs_held_by_a_long_transaction_are_gauged_and_capped(
    empty_dsn: str,
) -> None:
    from tests.system.presets.oban_client import Ack, ObanClient, insert_on, require_oban

    require_oban()
    async with ObanClient(empty_dsn) as oban:
        await oban.install()
        poller = RecordedPoller(empty_dsn, "oban", interval=0.2, max_held_jobs=CAP)
        async with poller.running(), oban.pool.connection() as late:
            await poller.cycles(3)
            assert _health(poller.last, "jobqueue_exporter_held_jobs") == 0
            async with late.transaction():
                await insert_on(late, "Late")  # a writer open while the others finish
                for _ in range(CAP + 2):
                    await oban.insert("Prompt")
                jobs = await oban.fetch("default", CAP + 2, "node", "uuid")
                await oban.ack([Ack(job, "completed") for job in jobs])
                await poller.until(lambda: poller.tallies.completed["Prompt"] == CAP + 2)
                await poller.cycles(3)
                # Finished, counted, and kept: the windows cannot pass them while it is open.
                held = _health(poller.last, "jobqueue_exporter_held_jobs")
                assert held is not None
                assert held >= CAP + 2
                assert _health(poller.last, "jobqueue_exporter_held_cap_exceeded") == 1
            await poller.until(
                lambda: _health(poller.last, "jobqueue_exporter_held_cap_exceeded") == 0
            )
        assert poller.tallies.enqueued == {"Late": 1, "Prompt": CAP + 2}
        assert poller.tallies.completed == {"Prompt": CAP + 2}
