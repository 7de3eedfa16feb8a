"""GoodJob 4's statements, issued as ActiveRecord issues them, in its order and transactions.

GoodJob is a Ruby gem and cannot run here, so this replays what touches the database, from its
source (app/models/good_job/job.rb: enqueue, perform_with_advisory_lock, perform, retry_job,
discard_job, force_discard_job; process.rb; advisory_lockable.rb; lib/good_job.rb:
cleanup_preserved_jobs): one connection per Ruby thread, so advisory locks and transactions
interact as in production. Every timestamp is the Ruby process's ``Time.current`` (its
:class:`Clock`, which may run behind or ahead of the database's), written as naive UTC, as
Rails writes ``timestamp(6) without time zone``. Each call logs what it did once it committed:
the log is the ground truth the test compares the exporter with.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

SCHEMA = Path(__file__).with_name("good_job_schema.sql")
# Job#discard_job's error: GoodJob::Job::DiscardJobError, as format_error writes it.
DISCARD_ERROR = "GoodJob::Job::DiscardJobError: "
# ErrorEvents: what ended an execution.
INTERRUPTED, UNHANDLED, RETRIED, RETRY_STOPPED, DISCARDED = 0, 1, 3, 4, 5
LOCK_KEY = "('x' || substr(md5({}), 1, 16))::bit(64)::bigint"  # advisory_lock_bigint_sql
TRY_LOCK = f"SELECT pg_try_advisory_lock({LOCK_KEY.format('$1::text')}) AS locked"
UNLOCK = f"SELECT pg_advisory_unlock({LOCK_KEY.format('$1::text')}) AS unlocked"
# Job.perform_with_advisory_lock: unfinished.dequeueing_ordered.only_scheduled.limit(1)
# .with_advisory_lock, under JobPerformer's queue_string scope.
DEQUEUE = (
    'SELECT "good_jobs".* FROM "good_jobs" WHERE "good_jobs"."id" IN (WITH "rows" AS MATERIALIZED '
    '(SELECT "good_jobs"."id" FROM "good_jobs" WHERE "good_jobs"."queue_name" = ANY($1::text[]) '
    'AND "good_jobs"."finished_at" IS NULL AND ("good_jobs"."scheduled_at" <= $2 OR '
    '"good_jobs"."scheduled_at" IS NULL) ORDER BY priority ASC NULLS LAST, '
    '"good_jobs"."created_at" ASC) SELECT "rows"."id" FROM "rows" WHERE pg_try_advisory_lock('
    + LOCK_KEY.format("'good_jobs' || '-' || \"rows\".\"id\"::text")
    + ') LIMIT 1) ORDER BY priority ASC NULLS LAST, "good_jobs"."created_at" ASC'
)
RELOAD = 'SELECT "good_jobs".* FROM "good_jobs" WHERE "good_jobs"."id" = $1 LIMIT 1'
INSERT_JOB = (
    'INSERT INTO "good_jobs" ("id", "queue_name", "priority", "serialized_params", '
    '"scheduled_at", "created_at", "updated_at", "active_job_id", "job_class") '
    "VALUES ($1, $2, 0, $3::jsonb, $4, $5, $5, $1, $6)"
)
CLOSE_INTERRUPTED = (
    'UPDATE "good_job_executions" SET "error" = $1, "finished_at" = $2, "error_event" = $3, '
    '"duration" = $4 WHERE "good_job_executions"."active_job_id" = $5 AND '
    '"good_job_executions"."finished_at" IS NULL AND "good_job_executions"."created_at" IS NOT NULL'
)
INSERT_EXECUTION = (
    'INSERT INTO "good_job_executions" ("created_at", "updated_at", "active_job_id", '
    '"job_class", "queue_name", "serialized_params", "scheduled_at", "process_id") '
    'VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8) RETURNING "id"'
)
START_JOB = (
    'UPDATE "good_jobs" SET "performed_at" = $1, "executions_count" = $2, "locked_by_id" = $3, '
    '"locked_at" = $4, "lock_type" = 0, "updated_at" = $4 WHERE "good_jobs"."id" = $5'
)
# The same after closing an interrupted attempt: update! also saves the error it assigned.
START_INTERRUPTED_JOB = (
    'UPDATE "good_jobs" SET "performed_at" = $1, "executions_count" = $2, "locked_by_id" = $3, '
    '"locked_at" = $4, "lock_type" = 0, "updated_at" = $4, "error" = $6, "error_event" = 0 '
    'WHERE "good_jobs"."id" = $5'
)
RETRY_JOB = (  # Job.enqueue of the job being performed: the same row, rewritten
    'UPDATE "good_jobs" SET "serialized_params" = $1::jsonb, "created_at" = $2, '
    '"scheduled_at" = $3, "performed_at" = NULL, "finished_at" = NULL, "updated_at" = $2 '
    'WHERE "good_jobs"."id" = $4'
)
END_EXECUTION = (
    'UPDATE "good_job_executions" SET "updated_at" = $1, "finished_at" = $1, "duration" = $2, '
    '"error" = $3, "error_event" = $4, "error_backtrace" = $5 WHERE "good_job_executions"."id" = $6'
)
END_JOB = (
    'UPDATE "good_jobs" SET "locked_by_id" = NULL, "locked_at" = NULL, "error" = $1, '
    '"error_event" = $2, "finished_at" = $3, "updated_at" = $4 WHERE "good_jobs"."id" = $5'
)
DISCARD_JOB = (
    'UPDATE "good_jobs" SET "finished_at" = $1, "error" = $2, "error_event" = 5, '
    '"updated_at" = $1 WHERE "good_jobs"."id" = $3'
)
MARK_RETRIED = (
    'UPDATE "good_jobs" SET "error_event" = 3, "updated_at" = $1 WHERE "good_jobs"."id" = $2'
)
REGISTER = (
    'INSERT INTO "good_job_processes" ("id", "state", "lock_type", "created_at", "updated_at") '
    "VALUES ($1, $2::jsonb, $3, $4, $4)"
)
REFRESH = 'UPDATE "good_job_processes" SET "state" = $1::jsonb, "updated_at" = $2 WHERE "id" = $3'
# Process.inactive (the scope Process.cleanup deletes): its advisory lock gone, or no heartbeat
# for EXPIRED_INTERVAL (5 minutes, $1 is that long before the cleaner's Time.current).
INACTIVE = (
    'SELECT "good_job_processes"."id" FROM "good_job_processes" LEFT JOIN pg_locks ON '
    "pg_locks.locktype = 'advisory' AND pg_locks.objsubid = 1 AND pg_locks.classid = "
    "substring(("
    + LOCK_KEY.format("'good_job_processes' || '-' || \"good_job_processes\".\"id\"::text")
    + ")::bit(64) from 1 for 32)::bit(32)::int AND pg_locks.objid = substring(("
    + LOCK_KEY.format("'good_job_processes' || '-' || \"good_job_processes\".\"id\"::text")
    + ')::bit(64) from 33 for 32)::bit(32)::int WHERE ("good_job_processes"."lock_type" = 0 '
    'AND pg_locks.locktype IS NULL OR "good_job_processes"."lock_type" IS NULL AND '
    '"good_job_processes"."updated_at" < $1) ORDER BY "good_job_processes"."id" LIMIT 1000'
)
UNLOCK_JOBS_OF = (
    'UPDATE "good_jobs" SET "locked_by_id" = NULL, "locked_at" = NULL '
    'WHERE "good_jobs"."locked_by_id" = $1'
)
DELETE_PROCESS = 'DELETE FROM "good_job_processes" WHERE "good_job_processes"."id" = $1'
OLD_FINISHED = (
    'SELECT "good_jobs"."active_job_id" FROM "good_jobs" WHERE (finished_at <= $1) '
    'ORDER BY "good_jobs"."finished_at" ASC LIMIT 1000'
)
DELETE_EXECUTIONS = 'DELETE FROM "good_job_executions" WHERE "active_job_id" = ANY($1::uuid[])'
DELETE_JOBS = 'DELETE FROM "good_jobs" WHERE "active_job_id" = ANY($1::uuid[])'


@dataclass(frozen=True)
class Clock:
    """A Ruby process's Time.current: the machine's clock, ``offset`` seconds off."""

    offset: float = 0.0

    def now(self) -> datetime:
        """Naive UTC, as Rails binds a ``timestamp without time zone``."""
        return (datetime.now(UTC) + timedelta(seconds=self.offset)).replace(tzinfo=None)


@dataclass(frozen=True)
class Entry:
    """One thing the harness did, logged once committed."""

    kind: str  # enqueued, started, ended, interrupted, retried_by_hand, discarded_by_hand, cleaned
    job_id: str
    job_class: str
    outcome: str | None = None  # ended: success, retry, unhandled, discard, retry_stopped
    duration: float | None = None  # ended success: finished_at - performed_at
    wait: float | None = None  # ended success: performed_at - scheduled_at


@dataclass
class Log:
    """What the harness did, in order; ``mark`` is where the exporter's baseline falls."""

    entries: list[Entry] = field(default_factory=list)
    mark: int = 0

    def add(self, *args: Any, **kwargs: Any) -> None:
        """Record one committed action."""
        self.entries.append(Entry(*args, **kwargs))

    def since_mark(self) -> list[Entry]:
        """What happened after the baseline."""
        return self.entries[self.mark :]


def params(job_class: str, queue: str, job_id: str, executions: int, args: Any) -> str:
    """ActiveJob's serialize(): what ``serialized_params`` holds."""
    return json.dumps({"job_class": job_class, "job_id": job_id, "provider_job_id": job_id,
                       "queue_name": queue, "priority": None, "arguments": [args],
                       "executions": executions, "exception_executions": {}, "locale": "en",
                       "timezone": "UTC"})  # fmt: skip


def lock_key(table: str, key: str) -> str:
    """AdvisoryLockable#lockable_column_key."""
    return f"{table}-{key}"


async def connect(dsn: str) -> asyncpg.Connection:
    """A Rails connection: the adapter sets the session's TimeZone to UTC."""
    return await asyncpg.connect(dsn, server_settings={"timezone": "UTC"})


async def install(dsn: str) -> None:
    """The install migration."""
    conn = await connect(dsn)
    try:
        await conn.execute(SCHEMA.read_text())
    finally:
        await conn.close()


async def insert(
    conn: asyncpg.Connection, clock: Clock, job_class: str, queue: str = "default",
    wait: float | None = None, args: Any = None,
) -> str:  # fmt: skip
    """Job.enqueue's INSERT on ``conn`` (in the caller's transaction, if one is open)."""
    job_id, created = str(uuid.uuid4()), clock.now()
    scheduled = created + timedelta(seconds=wait) if wait is not None else created
    await conn.execute(INSERT_JOB, job_id, queue, params(job_class, queue, job_id, 0, args),
                       scheduled, created, job_class)  # fmt: skip
    return job_id


async def enqueue(conn: asyncpg.Connection, clock: Clock, log: Log, job_class: str,
                  **kwargs: Any) -> str:  # fmt: skip
    """Job.enqueue: one transaction (ActiveRecord's save!), logged once committed."""
    async with conn.transaction():
        job_id = await insert(conn, clock, job_class, **kwargs)
    log.add("enqueued", job_id, job_class)
    return job_id


async def with_job_lock(conn: asyncpg.Connection, job_id: str) -> bool:
    """Job#with_advisory_lock's first half (the dashboard's actions take it)."""
    return bool(await conn.fetchval(TRY_LOCK, lock_key("good_jobs", job_id)))


async def retry_by_hand(conn: asyncpg.Connection, clock: Clock, log: Log, job_id: str) -> None:
    """Job#retry_job (the dashboard's Retry): a finished job with an error, the same row."""
    assert await with_job_lock(conn, job_id), "the job is locked"
    try:
        row = await conn.fetchrow(RELOAD, job_id)
        assert row["finished_at"] is not None, "ActionForStateMismatchError: unfinished"
        assert row["error"] is not None, "ActionForStateMismatchError: succeeded"
        serialized = json.loads(row["serialized_params"])
        serialized["executions"] = serialized.get("executions", 0) + 1
        async with conn.transaction():
            now = clock.now()
            await conn.execute(RETRY_JOB, json.dumps(serialized), now, now, job_id)
            await conn.execute(MARK_RETRIED, clock.now(), job_id)
        log.add("retried_by_hand", job_id, row["job_class"])
    finally:
        await conn.fetchval(UNLOCK, lock_key("good_jobs", job_id))


async def discard_by_hand(
    conn: asyncpg.Connection, clock: Clock, log: Log, job_id: str, force: bool = False
) -> None:
    """Job#discard_job (under the job's lock), or #force_discard_job (a running job too)."""
    locked = force or await with_job_lock(conn, job_id)
    assert locked, "the job is locked"
    try:
        row = await conn.fetchrow(RELOAD, job_id)
        assert row["finished_at"] is None, "ActionForStateMismatchError"
        async with conn.transaction():
            await conn.execute(DISCARD_JOB, clock.now(), DISCARD_ERROR + "by hand", job_id)
        log.add("discarded_by_hand", job_id, row["job_class"])
    finally:
        if not force:
            await conn.fetchval(UNLOCK, lock_key("good_jobs", job_id))


async def cleanup_preserved_jobs(
    conn: asyncpg.Connection, clock: Clock, log: Log, older_than: float
) -> int:
    """GoodJob.cleanup_preserved_jobs: finished jobs (discarded too) and their executions,
    in batches, each DELETE in its own transaction."""
    deleted = 0
    while True:
        rows = await conn.fetch(OLD_FINISHED, clock.now() - timedelta(seconds=older_than))
        ids = [row["active_job_id"] for row in rows]
        if not ids:
            return deleted
        await conn.execute(DELETE_EXECUTIONS, ids)
        await conn.execute(DELETE_JOBS, ids)
        for job_id in ids:
            log.add("cleaned", str(job_id), "")
        deleted += len(ids)


@dataclass
class GoodJobProcess:
    """One GoodJob process (a capsule's process record) with its clock and its threads'
    connections; ``advisory``: its record is advisory-locked (advisory_lock_heartbeat, the
    development default), else it only heartbeats (production's)."""

    dsn: str
    clock: Clock
    advisory: bool
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    conn: asyncpg.Connection | None = None
    # The process's own connection serves one statement at a time (its tracker's thread).
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def start(self) -> None:
        """Process.find_or_create_record: the INSERT, and the lock in its after_create."""
        self.conn = await connect(self.dsn)
        async with self.conn.transaction():
            await self.conn.execute(REGISTER, self.id, json.dumps({"pid": 1}),
                                    0 if self.advisory else None, self.clock.now())  # fmt: skip
            if self.advisory:
                key = lock_key("good_job_processes", self.id)
                assert await self.conn.fetchval(TRY_LOCK, key)

    async def refresh(self) -> None:
        """Process#refresh: the heartbeat."""
        assert self.conn is not None
        async with self.lock:
            await self.conn.execute(REFRESH, json.dumps({"pid": 1}), self.clock.now(), self.id)

    async def cleanup(self) -> list[str]:
        """Process.cleanup, as a live process runs it: each inactive process's jobs are
        unlocked and its record deleted."""
        assert self.conn is not None
        expired = self.clock.now() - timedelta(minutes=5)
        async with self.lock:
            gone = [str(row["id"]) for row in await self.conn.fetch(INACTIVE, expired)]
            for process_id in gone:
                await self.conn.execute(UNLOCK_JOBS_OF, process_id)
                await self.conn.execute(DELETE_PROCESS, process_id)
        return gone

    async def stop(self) -> None:
        """Process#deregister (destroy!, whose after_destroy unlocks its jobs), then close."""
        if self.conn is None:
            return
        async with self.conn.transaction():
            await self.conn.execute(DELETE_PROCESS, self.id)
            await self.conn.execute(UNLOCK_JOBS_OF, self.id)
        await self.conn.close()
        self.conn = None


# What the job's code does, given its class, ActiveJob's executions (this attempt's number)
# and its arguments: "success", ("retry", wait) for retry_on, "unhandled" (an error no
# retry_on or discard_on catches), "discard" (discard_on), "retry_stopped" (retry_on's
# attempts used up, re-raised).
Decide = Any
ERROR_EVENTS = {"retry": RETRIED, "unhandled": UNHANDLED, "discard": DISCARDED,
                "retry_stopped": RETRY_STOPPED}  # fmt: skip


@dataclass
class Performer:
    """One GoodJob thread: its own connection, performing jobs of ``queues`` for ``process``
    as Job.perform_with_advisory_lock and Job#perform do."""

    process: GoodJobProcess
    queues: list[str]
    decide: Decide
    log: Log
    conn: asyncpg.Connection | None = None

    async def open(self) -> None:
        """The thread's connection."""
        self.conn = await connect(self.process.dsn)

    async def close(self) -> None:
        """Close the connection (a SIGKILL closes it the same way)."""
        if self.conn is not None:
            await self.conn.close()

    async def claim(self) -> asyncpg.Record | None:
        """The next due job of ``queues``, advisory-locked by this thread's session, and
        reloaded (Job#executable?: still unfinished); None when none is due."""
        conn = self.conn
        assert conn is not None
        row = await conn.fetchrow(DEQUEUE, self.queues, self.process.clock.now())
        if row is None:
            return None
        fresh = await conn.fetchrow(RELOAD, row["id"])
        if fresh is None or fresh["finished_at"] is not None:
            await conn.fetchval(UNLOCK, lock_key("good_jobs", str(row["id"])))
            return None
        return fresh

    async def perform_next(self) -> bool:
        """Lock the next due job, perform it, unlock it; False when none was due."""
        conn = self.conn
        assert conn is not None
        row = await self.claim()
        if row is None:
            return False
        try:
            await self.perform(row)
        finally:
            await conn.fetchval(UNLOCK, lock_key("good_jobs", str(row["id"])))
        return True

    async def start(self, row: asyncpg.Record) -> tuple[str, datetime, int]:
        """Job#perform up to the job's code: an interrupted attempt closed, the execution and
        the job's update in one transaction. Returns (execution id, performed_at, executions)."""
        conn, clock, job_id = self.conn, self.process.clock, row["id"]
        assert conn is not None
        performed = clock.now()
        error = None
        if row["performed_at"] is not None:  # its last attempt's process died mid-job
            since = row["performed_at"]
            error = f"GoodJob::InterruptError: Interrupted after starting perform at '{since}'"
            closed = await conn.execute(CLOSE_INTERRUPTED, error, performed, INTERRUPTED,
                                        timedelta(0), job_id)  # fmt: skip
            if closed != "UPDATE 0":
                self.log.add("interrupted", str(job_id), row["job_class"])
        serialized = json.loads(row["serialized_params"])
        async with conn.transaction():
            execution = await conn.fetchval(
                INSERT_EXECUTION, performed, clock.now(), job_id, row["job_class"],
                row["queue_name"], row["serialized_params"],
                row["scheduled_at"] or row["created_at"], self.process.id,
            )  # fmt: skip
            count = (row["executions_count"] or 0) + 1
            if error is None:
                await conn.execute(START_JOB, performed, count, self.process.id, clock.now(),
                                   job_id)  # fmt: skip
            else:
                await conn.execute(START_INTERRUPTED_JOB, performed, count, self.process.id,
                                   clock.now(), job_id, error)  # fmt: skip
        self.log.add("started", str(job_id), row["job_class"])
        return str(execution), performed, serialized.get("executions", 0) + 1

    async def perform(self, row: asyncpg.Record) -> None:
        """Job#perform: start, run the job's code (maybe retry_on's enqueue of the same row),
        then the execution's end and the job's in one transaction."""
        conn, clock, job_id, job_class = self.conn, self.process.clock, row["id"], row["job_class"]
        assert conn is not None
        execution, performed, executions = await self.start(row)
        serialized = json.loads(row["serialized_params"])
        outcome = self.decide(job_class, executions, serialized["arguments"][0])
        wait = None
        if isinstance(outcome, tuple):
            outcome, wait = outcome
        if outcome == "retry":  # retry_on: Job.enqueue of the current job, one save!
            serialized["executions"] = executions
            async with conn.transaction():
                now = clock.now()
                await conn.execute(RETRY_JOB, json.dumps(serialized), now,
                                   now + timedelta(seconds=wait or 0), job_id)  # fmt: skip
        error = None if outcome == "success" else f"RuntimeError: {job_class} failed"
        event = ERROR_EVENTS.get(outcome)
        finished = clock.now()
        async with conn.transaction():
            await conn.execute(END_EXECUTION, finished, finished - performed, error, event,
                               ["app/jobs/x.rb:1"] if error else None, uuid.UUID(execution))  # fmt: skip
            await conn.execute(END_JOB, error, event,
                               None if outcome == "retry" else finished, finished, job_id)  # fmt: skip
        duration = wait_s = None
        if outcome == "success":
            duration = (finished - performed).total_seconds()
            wait_s = (performed - (row["scheduled_at"] or row["created_at"])).total_seconds()
        self.log.add("ended", str(job_id), job_class, outcome, duration, wait_s)
