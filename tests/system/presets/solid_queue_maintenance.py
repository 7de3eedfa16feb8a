"""Solid Queue 1.5's maintenance and operator statements: dispatch, retry and discard by hand,
processes (register, heartbeat, prune, a graceful stop) and clearing finished jobs.

Sections 6 and 8 to 11 of ../shared/research/queues-ddl/solid_queue_queries.sql, issued as
:mod:`tests.system.presets.solid_queue_client` issues the rest.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

from tests.system.presets.solid_queue_client import ALIVE_THRESHOLD, PRUNED, Process


class RailsProcess(Process):
    """A Rails process that also dispatches, retries and discards by hand, and has a row."""

    # --- 6. Dispatch, 8. Retry by hand, 11. Discard ------------------------------------------
    async def dispatch(self) -> int:
        """ScheduledExecution.dispatch_next_batch: due rows to ready (insert_all)."""
        async with self.conn.transaction():
            cursor = await self.conn.execute(
                'SELECT "solid_queue_scheduled_executions"."job_id" FROM '
                '"solid_queue_scheduled_executions" WHERE '
                '"solid_queue_scheduled_executions"."scheduled_at" <= %s ORDER BY '
                '"solid_queue_scheduled_executions"."scheduled_at" ASC, '
                '"solid_queue_scheduled_executions"."priority" ASC, '
                '"solid_queue_scheduled_executions"."job_id" ASC LIMIT 500 FOR UPDATE SKIP LOCKED',
                (self.now(),),
            )  # fmt: skip
            ids = [int(r["job_id"]) for r in await cursor.fetchall()]
            if ids:
                await self._ready_all(ids)
                await self.conn.execute(
                    'DELETE FROM "solid_queue_scheduled_executions" '
                    'WHERE "solid_queue_scheduled_executions"."job_id" = ANY(%s)', (ids,),
                )  # fmt: skip
        return len(ids)

    async def _ready_all(self, job_ids: list[int]) -> None:
        """ReadyExecution.create_all_from_jobs: insert_all, CURRENT_TIMESTAMP, no conflict."""
        await self.conn.execute(
            'INSERT INTO "solid_queue_ready_executions" ("queue_name","priority","job_id",'
            '"created_at") SELECT j.queue_name, j.priority, j.id, CURRENT_TIMESTAMP '
            'FROM "solid_queue_jobs" j WHERE j.id = ANY(%s) ON CONFLICT DO NOTHING RETURNING "id"',
            (job_ids,),
        )  # fmt: skip

    async def retry(self, job_id: int) -> None:
        """FailedExecution#retry (Mission Control's Retry): the same job row, executions 0."""
        async with self.conn.transaction():
            failed = await self._one(
                'SELECT "solid_queue_failed_executions".* FROM "solid_queue_failed_executions" '
                'WHERE "solid_queue_failed_executions"."job_id" = %s LIMIT 1 FOR UPDATE', job_id,
            )  # fmt: skip
            assert failed is not None, f"job {job_id} has no failed execution"
            job = await self._one('SELECT * FROM "solid_queue_jobs" WHERE "id" = %s', job_id)
            assert job is not None
            args = json.loads(job["arguments"]) | {"executions": 0, "exception_executions": {}}
            await self.conn.execute(
                'UPDATE "solid_queue_jobs" SET "arguments" = %s, "updated_at" = %s '
                'WHERE "solid_queue_jobs"."id" = %s',
                (json.dumps(args, separators=(",", ":")), self.now(), job_id),
            )  # fmt: skip
            async with self.conn.transaction():
                await self.conn.execute(
                    'INSERT INTO "solid_queue_ready_executions" ("job_id", "queue_name", '
                    '"priority", "created_at") VALUES (%s, %s, %s, %s) RETURNING "id"',
                    (job_id, job["queue_name"], job["priority"], self.now()),
                )  # fmt: skip
            await self.conn.execute(
                'DELETE FROM "solid_queue_failed_executions" '
                'WHERE "solid_queue_failed_executions"."id" = %s', (failed["id"],),
            )  # fmt: skip

    async def retry_all(self, job_ids: list[int]) -> None:
        """FailedExecution.retry_all (Retry all): dispatch_jobs, counters not reset."""
        async with self.conn.transaction():
            await self.conn.execute(
                'SELECT "job_id" FROM "solid_queue_failed_executions" WHERE "job_id" = ANY(%s) '
                'ORDER BY "job_id" FOR UPDATE', (job_ids,),
            )  # fmt: skip
            await self._ready_all(job_ids)
            await self.conn.execute(
                'DELETE FROM "solid_queue_failed_executions" WHERE "job_id" = ANY(%s)', (job_ids,)
            )

    async def discard(self, table: str, job_id: int) -> None:
        """Execution#discard (Mission Control's Discard) of a ready/scheduled/failed job."""
        async with self.conn.transaction():
            found = await self._one(
                f'SELECT "{table}".* FROM "{table}" WHERE "{table}"."job_id" = %s LIMIT 1 '
                "FOR UPDATE", job_id,
            )  # fmt: skip
            assert found is not None, f"job {job_id} is not in {table}"
            await self.conn.execute('DELETE FROM "solid_queue_jobs" WHERE "id" = %s', (job_id,))
            await self.conn.execute(f'DELETE FROM "{table}" WHERE "id" = %s', (found["id"],))

    # --- 9. Processes, 10. Clear finished jobs -----------------------------------------------
    async def register(self, kind: str) -> int:
        """Process.register."""
        now = self.now()
        row = await self._one(
            'INSERT INTO "solid_queue_processes" ("kind", "last_heartbeat_at", "supervisor_id", '
            '"pid", "hostname", "metadata", "created_at", "name") VALUES '
            "(%s, %s, NULL, %s, 'test', '{}', %s, %s) RETURNING \"id\"",
            kind, now, 1000 + (self.skew != 0), now, f"{kind.lower()}-{uuid.uuid4().hex[:20]}",
        )  # fmt: skip
        assert row is not None
        self.id = int(row["id"])
        return self.id

    async def heartbeat(self) -> None:
        """Process#heartbeat: with_lock { touch(:last_heartbeat_at) }."""
        async with self.conn.transaction():
            await self._one('SELECT * FROM "solid_queue_processes" WHERE "id" = %s FOR UPDATE',
                            self.id)  # fmt: skip
            await self.conn.execute(
                'UPDATE "solid_queue_processes" SET "last_heartbeat_at" = %s WHERE "id" = %s',
                (self.now(), self.id),
            )

    async def deregister(self) -> None:
        """Process#destroy! and after_destroy release_all_claimed_executions (a graceful stop,
        or the end of a prune): what it still claims goes back to ready, no failure."""
        async with self.conn.transaction():
            await self.conn.execute(
                'DELETE FROM "solid_queue_processes" WHERE "id" = %s', (self.id,)
            )
            await self.release_claimed(self.id)

    async def release_claimed(self, process_id: int | None) -> None:
        """ClaimedExecution#release for each claimed row of a process."""
        cursor = await self.conn.execute(
            'SELECT * FROM "solid_queue_claimed_executions" WHERE "process_id" = %s', (process_id,)
        )
        for claimed in await cursor.fetchall():
            async with self.conn.transaction():
                if not await self._lock_claimed(claimed["id"]):
                    continue
                job = await self._one('SELECT * FROM "solid_queue_jobs" WHERE "id" = %s',
                                      claimed["job_id"])  # fmt: skip
                assert job is not None
                async with self.conn.transaction():
                    await self.conn.execute(
                        'INSERT INTO "solid_queue_ready_executions" ("job_id", "queue_name", '
                        '"priority", "created_at") VALUES (%s, %s, %s, %s) RETURNING "id"',
                        (job["id"], job["queue_name"], job["priority"], self.now()),
                    )  # fmt: skip
                await self._delete_claimed(claimed["id"])

    async def prune(self) -> list[int]:
        """Process.prune (the supervisor): fail what a dead process claimed, then destroy it.
        Returns the failed job ids."""
        cursor = await self.conn.execute(
            'SELECT "solid_queue_processes".* FROM "solid_queue_processes" WHERE '
            '"solid_queue_processes"."last_heartbeat_at" <= %s AND "solid_queue_processes"."id" '
            '!= %s ORDER BY "solid_queue_processes"."id" ASC LIMIT 50 FOR UPDATE SKIP LOCKED',
            (self.now() - ALIVE_THRESHOLD, self.id),
        )  # fmt: skip
        failed: list[int] = []
        for process in await cursor.fetchall():
            claims = await self.conn.execute(
                'SELECT * FROM "solid_queue_claimed_executions" WHERE "process_id" = %s',
                (process["id"],),
            )  # fmt: skip
            for claimed in await claims.fetchall():
                message = f"Process was found dead and pruned (last heartbeat at: {process['last_heartbeat_at']})"
                if await self.fail({"claimed_id": claimed["id"], "job_id": claimed["job_id"]},
                                   PRUNED, message):  # fmt: skip
                    failed.append(int(claimed["job_id"]))
            async with self.conn.transaction():
                await self.conn.execute('DELETE FROM "solid_queue_processes" WHERE "id" = %s',
                                        (process["id"],))  # fmt: skip
                await self.release_claimed(int(process["id"]))
        return failed

    async def clear_finished(self, older_than: timedelta) -> int:
        """Job.clear_finished_in_batches(finished_before: older_than.ago): batches of 500."""
        cleared = 0
        while True:
            cursor = await self.conn.execute(
                'DELETE FROM "solid_queue_jobs" WHERE "solid_queue_jobs"."id" IN (SELECT '
                '"solid_queue_jobs"."id" FROM "solid_queue_jobs" WHERE '
                '"solid_queue_jobs"."finished_at" IS NOT NULL AND '
                '"solid_queue_jobs"."finished_at" < %s LIMIT 500)', (self.now() - older_than,),
            )  # fmt: skip
            cleared += cursor.rowcount
            if cursor.rowcount == 0:
                return cleared
