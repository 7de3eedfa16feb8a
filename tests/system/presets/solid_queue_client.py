"""Solid Queue 1.5's statements, issued as ActiveRecord issues them on PostgreSQL.

Solid Queue is a gem and cannot run here; its SQL is the part that touches the database. Each
method below is one transition of ../shared/research/queues-ddl/solid_queue_queries.sql (the
section in its docstring), with Rails' transaction boundaries (``transaction do``: BEGIN ...
COMMIT; ``create_or_find_by!``: a SAVEPOINT), its clocks (``create!``, ``touch``: the Ruby
process's clock, bound; ``insert_all``: CURRENT_TIMESTAMP) and a session in TimeZone UTC, as
the Rails adapter sets it. One :class:`Process` is one Rails process on its own connection,
with its own clock: ``skew`` seconds off the database's, and its app's
``preserve_finished_jobs`` (on by default, as in Solid Queue; off, a finish deletes the job).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

SCHEMA = Path(__file__).with_name("solid_queue_schema.sql")
PRUNED = "SolidQueue::Processes::ProcessPrunedError"
ALIVE_THRESHOLD = timedelta(minutes=5)  # SolidQueue.process_alive_threshold


def arguments(class_name: str, job_id: str, executions: int, queue: str) -> str:
    """ActiveJob::Base#serialize as JSON.dump writes it (Job.attributes_from_active_job)."""
    return json.dumps({
        "job_class": class_name, "job_id": job_id, "provider_job_id": None,
        "queue_name": queue, "priority": None, "arguments": [{"executions": 99}],
        "executions": executions, "exception_executions": {}, "locale": "en",
        "timezone": "UTC", "enqueued_at": "2026-01-01T00:00:00Z",
    }, separators=(",", ":"))  # fmt: skip


@dataclass
class Enqueued:
    """One jobs row as Job.enqueue made it."""

    id: int
    class_name: str
    active_job_id: str
    executions: int
    queue: str
    where: str  # ready, scheduled or blocked


class Process:
    """One Rails process (an app server, a worker, the dispatcher, the supervisor)."""

    def __init__(
        self, conn: psycopg.AsyncConnection[dict[str, Any]], skew: float = 0.0,
        preserve: bool = True,
    ) -> None:  # fmt: skip
        self.conn = conn
        self.skew = skew
        # SolidQueue.preserve_finished_jobs: a setting of the Rails app, which the tables do
        # not record; every process of one app shares it.
        self.preserve = preserve
        self.id: int | None = None  # its solid_queue_processes row, once registered

    @classmethod
    async def connect(cls, dsn: str, skew: float = 0.0, preserve: bool = True) -> Process:
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True, row_factory=dict_row)
        await conn.execute("SET TimeZone TO 'UTC'")
        return cls(conn, skew, preserve)

    async def close(self) -> None:
        await self.conn.close()

    def now(self) -> datetime:
        """Time.current on this process's clock: naive UTC, as Rails binds it."""
        return (datetime.now(UTC) + timedelta(seconds=self.skew)).replace(tzinfo=None)

    async def _one(self, sql: str, *args: Any) -> dict[str, Any] | None:
        cursor = await self.conn.execute(sql, args)
        return await cursor.fetchone()

    # --- 1. Enqueue ----------------------------------------------------------------------
    async def enqueue(
        self, class_name: str, *, queue: str = "default", executions: int = 0,
        active_job_id: str | None = None, delay: float = 0.0, concurrency_key: str | None = None,
    ) -> Enqueued:  # fmt: skip
        """Job.enqueue: create! the row, then prepare_for_execution, in one transaction."""
        async with self.conn.transaction():
            return await self.enqueue_in_transaction(
                class_name, queue=queue, executions=executions, active_job_id=active_job_id,
                delay=delay, concurrency_key=concurrency_key,
            )  # fmt: skip

    async def enqueue_in_transaction(
        self, class_name: str, *, queue: str = "default", executions: int = 0,
        active_job_id: str | None = None, delay: float = 0.0, concurrency_key: str | None = None,
    ) -> Enqueued:  # fmt: skip
        """The body of Job.enqueue, inside the caller's transaction (an app's)."""
        now = self.now()
        scheduled_at = now + timedelta(seconds=delay)
        job_id = active_job_id or str(uuid.uuid4())
        row = await self._one(
            'INSERT INTO "solid_queue_jobs" ("queue_name", "class_name", "arguments", '
            '"priority", "active_job_id", "scheduled_at", "finished_at", "concurrency_key", '
            '"created_at", "updated_at") VALUES (%s, %s, %s, %s, %s, %s, NULL, %s, %s, %s) '
            'RETURNING "id"',
            queue, class_name, arguments(class_name, job_id, executions, queue), 0, job_id,
            scheduled_at, concurrency_key, now, now,
        )  # fmt: skip
        assert row is not None
        job = Enqueued(int(row["id"]), class_name, job_id, executions, queue, "ready")
        if delay > 0:  # 1b: not yet due
            job.where = "scheduled"
            async with self.conn.transaction():
                await self.conn.execute(
                    'INSERT INTO "solid_queue_scheduled_executions" ("job_id", "queue_name", '
                    '"priority", "scheduled_at", "created_at") VALUES (%s, %s, 0, %s, %s) '
                    'RETURNING "id"', (job.id, queue, scheduled_at, now),
                )  # fmt: skip
        elif concurrency_key is not None and not await self._acquire(concurrency_key):
            job.where = "blocked"  # 1c: the semaphore is taken
            await self.conn.execute(
                'INSERT INTO "solid_queue_blocked_executions" ("job_id", "queue_name", '
                '"priority", "concurrency_key", "expires_at", "created_at") '
                'VALUES (%s, %s, 0, %s, %s, %s) RETURNING "id"',
                (job.id, queue, concurrency_key, now + timedelta(minutes=3), now),
            )  # fmt: skip
        else:  # 1a: ReadyExecution.create_or_find_by!
            async with self.conn.transaction():
                await self.conn.execute(
                    'INSERT INTO "solid_queue_ready_executions" ("job_id", "queue_name", '
                    '"priority", "created_at") VALUES (%s, %s, 0, %s) RETURNING "id"',
                    (job.id, queue, now),
                )
        return job

    async def _acquire(self, key: str) -> bool:
        """Semaphore::Proxy#wait with limit 1 (inside the enqueue's transaction)."""
        found = await self._one(
            'SELECT "solid_queue_semaphores".* FROM "solid_queue_semaphores" '
            'WHERE "solid_queue_semaphores"."key" = %s LIMIT 1 FOR UPDATE', key,
        )  # fmt: skip
        if found is None:
            made = await self._one(
                'INSERT INTO "solid_queue_semaphores" ("key", "value", "expires_at", '
                '"created_at", "updated_at") VALUES (%s, 0, %s, CURRENT_TIMESTAMP, '
                'CURRENT_TIMESTAMP) ON CONFLICT ("key") DO NOTHING RETURNING "id"',
                key, self.now() + timedelta(minutes=3),
            )  # fmt: skip
            return made is not None
        cursor = await self.conn.execute(
            'UPDATE "solid_queue_semaphores" SET value = value - 1, expires_at = %s '
            'WHERE (value > 0) AND "solid_queue_semaphores"."key" = %s',
            (self.now() + timedelta(minutes=3), key),
        )
        return cursor.rowcount == 1

    # --- 2. Claim ------------------------------------------------------------------------
    async def claim(self, queue: str, limit: int) -> list[dict[str, Any]]:
        """ReadyExecution.claim: lock candidates, insert_all claimed, delete them from ready;
        then load each job. Returns claimed rows with the job's columns."""
        assert self.id is not None
        async with self.conn.transaction():
            await self.conn.execute(
                'SELECT "solid_queue_pauses"."queue_name" FROM "solid_queue_pauses"'
            )
            cursor = await self.conn.execute(
                'SELECT "solid_queue_ready_executions"."id", "solid_queue_ready_executions"."job_id" '
                'FROM "solid_queue_ready_executions" WHERE "solid_queue_ready_executions"."queue_name" = %s '
                'ORDER BY "solid_queue_ready_executions"."priority" ASC, '
                '"solid_queue_ready_executions"."job_id" ASC LIMIT %s FOR UPDATE SKIP LOCKED',
                (queue, limit),
            )  # fmt: skip
            ready = await cursor.fetchall()
            if not ready:
                return []
            values = ", ".join(f"({int(r['job_id'])}, {self.id}, CURRENT_TIMESTAMP)" for r in ready)
            await self.conn.execute(
                'INSERT INTO "solid_queue_claimed_executions" ("job_id","process_id","created_at") '
                f'VALUES {values} RETURNING "id"'
            )  # fmt: skip
            cursor = await self.conn.execute(
                'SELECT "solid_queue_claimed_executions".* FROM "solid_queue_claimed_executions" '
                'WHERE "solid_queue_claimed_executions"."job_id" = ANY(%s) '
                'AND "solid_queue_claimed_executions"."process_id" = %s',
                ([int(r["job_id"]) for r in ready], self.id),
            )  # fmt: skip
            claimed = await cursor.fetchall()
            await self.conn.execute(
                'DELETE FROM "solid_queue_ready_executions" '
                'WHERE "solid_queue_ready_executions"."id" = ANY(%s)', ([r["id"] for r in ready],),
            )  # fmt: skip
        out = []
        for c in claimed:
            job = await self._one(
                'SELECT "solid_queue_jobs".* FROM "solid_queue_jobs" '
                'WHERE "solid_queue_jobs"."id" = %s LIMIT 1', c["job_id"],
            )  # fmt: skip
            assert job is not None
            out.append({**job, "claimed_id": c["id"], "job_id": c["job_id"]})
        return out

    # --- 3. Finish, 4. Fail -----------------------------------------------------------------
    async def finish(self, claimed: dict[str, Any]) -> bool:
        """ClaimedExecution#finished -> Job#finished!, then the claimed row's destroy!, in
        finalize's transaction: with preserve_finished_jobs on, touch(:finished_at); off,
        the job's destroy! (:meth:`_destroy_job`)."""
        async with self.conn.transaction():
            if not await self._lock_claimed(claimed["claimed_id"]):
                return False  # already finalized by someone else (pruned)
            if self.preserve:
                now = self.now()
                await self.conn.execute(
                    'UPDATE "solid_queue_jobs" SET "finished_at" = %s, "updated_at" = %s '
                    'WHERE "solid_queue_jobs"."id" = %s', (now, now, claimed["job_id"]),
                )  # fmt: skip
            else:
                await self._destroy_job(claimed)
            await self._delete_claimed(claimed["claimed_id"])
        if claimed.get("concurrency_key"):
            await self._unblock(str(claimed["concurrency_key"]))
        return True

    async def fail(self, claimed: dict[str, Any], exception: str, message: str) -> bool:
        """ClaimedExecution#failed_with -> FailedExecution.create! (section 4)."""
        async with self.conn.transaction():
            if not await self._lock_claimed(claimed["claimed_id"]):
                return False
            error = json.dumps({"exception_class": exception, "message": message,
                                "backtrace": ["app/jobs/x.rb:3:in `perform'"]})  # fmt: skip
            async with self.conn.transaction():
                await self.conn.execute(
                    'INSERT INTO "solid_queue_failed_executions" ("job_id", "error", "created_at") '
                    'VALUES (%s, %s, %s) RETURNING "id"', (claimed["job_id"], error, self.now()),
                )  # fmt: skip
            await self._delete_claimed(claimed["claimed_id"])
        return True

    async def _destroy_job(self, claimed: dict[str, Any]) -> None:
        """Job#destroy! (preserve_finished_jobs off). Solid Queue 1.5's has_one executions
        carry no ``dependent:``: the foreign keys' ON DELETE CASCADE take the claimed row with
        the job, so the claimed row's own destroy! after it deletes nothing. Its one
        before_destroy (ConcurrencyControls: unblock the next job if a limited job is still
        ready) first asks ``ready?`` of a limited job; a claimed job is not ready."""
        if claimed.get("concurrency_key"):
            await self._one(
                'SELECT "solid_queue_ready_executions".* FROM "solid_queue_ready_executions" '
                'WHERE "solid_queue_ready_executions"."job_id" = %s LIMIT 1', claimed["job_id"],
            )  # fmt: skip
        await self.conn.execute(
            'DELETE FROM "solid_queue_jobs" WHERE "solid_queue_jobs"."id" = %s',
            (claimed["job_id"],),
        )

    async def _lock_claimed(self, claimed_id: int) -> bool:
        found = await self._one(
            'SELECT "solid_queue_claimed_executions".* FROM "solid_queue_claimed_executions" '
            'WHERE "solid_queue_claimed_executions"."id" = %s LIMIT 1 FOR UPDATE', claimed_id,
        )  # fmt: skip
        return found is not None

    async def _delete_claimed(self, claimed_id: int) -> None:
        await self.conn.execute(
            'DELETE FROM "solid_queue_claimed_executions" '
            'WHERE "solid_queue_claimed_executions"."id" = %s', (claimed_id,),
        )  # fmt: skip

    async def _unblock(self, key: str) -> None:
        """After a limited job's finish: signal the semaphore, then release_one (section 7)."""
        await self.conn.execute(
            'UPDATE "solid_queue_semaphores" SET value = value + 1, expires_at = %s '
            'WHERE "key" = %s AND "value" < 1', (self.now() + timedelta(minutes=3), key),
        )  # fmt: skip
        async with self.conn.transaction():
            blocked = await self._one(
                'SELECT "solid_queue_blocked_executions".* FROM "solid_queue_blocked_executions" '
                'WHERE "solid_queue_blocked_executions"."concurrency_key" = %s '
                'ORDER BY "solid_queue_blocked_executions"."priority" ASC, '
                '"solid_queue_blocked_executions"."job_id" ASC LIMIT 1 FOR UPDATE SKIP LOCKED', key,
            )  # fmt: skip
            if blocked is None or not await self._acquire(key):
                return
            await self.conn.execute(
                'INSERT INTO "solid_queue_ready_executions" ("job_id", "queue_name", "priority", '
                '"created_at") VALUES (%s, %s, %s, %s) RETURNING "id"',
                (blocked["job_id"], blocked["queue_name"], blocked["priority"], self.now()),
            )  # fmt: skip
            await self.conn.execute(
                'DELETE FROM "solid_queue_blocked_executions" '
                'WHERE "solid_queue_blocked_executions"."id" = %s', (blocked["id"],),
            )  # fmt: skip


async def install(dsn: str) -> None:
    """The schema as the Rails schema loader creates it (solid_queue_schema.sql)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(SCHEMA.read_text())
