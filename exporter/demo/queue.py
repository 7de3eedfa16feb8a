"""The job queue's state machine, written after the queue's reference SQL, for the simulated fleet.

Every transition is one conditional statement whose RETURNING row is turned into a
:class:`Transition`, so a ground-truth tally is built from what the database committed,
with the database's own timestamps.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg

from exporter.vocabulary import DEADLINE_PREFIX, LEASE_EXPIRED_MARKER, Status

PENDING, RUNNING, DONE, DEAD = (int(status) for status in Status)
NOTIFY_CHANNEL = "lps_job"
DEADLINE_ERROR = f"{DEADLINE_PREFIX}: ran longer than 300s"

SCHEMA_FILE = Path(__file__).parent.parent / "sql" / "schema.sql"
INDEXES_FILE = Path(__file__).parent.parent / "sql" / "indexes.sql"

_ROW = """job_id, job_type, status, attempts, max_attempts, worker_id, created_at, run_after,
    run_started_at, updated_at, lease_until, last_error, result"""

# The optional $n filters (one job, reserved jobs) let hazard helpers drive one job
# through the machine without the fleet's workers or reaper taking it.
_ENQUEUE = f"""
INSERT INTO job (job_id, job_type, priority, payload, dedupe_key, max_attempts)
VALUES (coalesce($1::uuid, gen_random_uuid()), $2, $3, $4::jsonb, $5, $6)
ON CONFLICT (dedupe_key) WHERE status IN ({PENDING}, {RUNNING}) AND dedupe_key IS NOT NULL
DO NOTHING
RETURNING {_ROW}
"""
_CLAIM = f"""
UPDATE job SET status = {RUNNING}, worker_id = $1, lease_until = now() + make_interval(secs => $2),
    run_started_at = now(), attempts = attempts + 1, updated_at = now()
WHERE job_id = (
    SELECT job_id FROM job
    WHERE status = {PENDING} AND run_after <= now()
      AND ($3::uuid IS NULL OR job_id = $3) AND NOT (job_id = ANY($4::uuid[]))
    ORDER BY priority, created_at
    FOR UPDATE SKIP LOCKED
    LIMIT 1
)
RETURNING {_ROW}
"""
_RENEW = f"""
UPDATE job SET lease_until = now() + make_interval(secs => $3), updated_at = now()
WHERE job_id = $1 AND worker_id = $2 AND status = {RUNNING}
RETURNING {_ROW}
"""
_COMPLETE = f"""
UPDATE job SET status = {DONE}, result = $3::jsonb, lease_until = NULL, worker_id = NULL,
    updated_at = now()
WHERE job_id = $1 AND status = {RUNNING} AND worker_id = $2
RETURNING {_ROW}
"""
_FAIL = f"""
UPDATE job SET
    status = CASE WHEN attempts >= max_attempts THEN {DEAD} ELSE {PENDING} END,
    run_after = CASE WHEN attempts >= max_attempts THEN run_after
        ELSE now() + make_interval(secs => least(600, $4 * power(2, greatest(attempts - 1, 0))))
        END,
    last_error = $3, lease_until = NULL, worker_id = NULL, updated_at = now()
WHERE job_id = $1 AND status = {RUNNING} AND worker_id = $2
RETURNING {_ROW}
"""
_REAP = f"""
UPDATE job SET
    status = CASE WHEN attempts >= max_attempts THEN {DEAD} ELSE {PENDING} END,
    run_after = now(),
    last_error = coalesce(last_error, '') || '{LEASE_EXPIRED_MARKER}',
    lease_until = NULL, worker_id = NULL, updated_at = now()
WHERE status = {RUNNING} AND lease_until IS NOT NULL AND lease_until < now()
  AND ($1::uuid IS NULL OR job_id = $1) AND NOT (job_id = ANY($2::uuid[]))
RETURNING {_ROW}
"""
_REQUEUE = f"""
UPDATE job SET status = {PENDING}, attempts = 0, run_after = now(), lease_until = NULL,
    worker_id = NULL, run_started_at = NULL, last_error = NULL, updated_at = now()
WHERE job_id = $1 AND status = {DEAD}
RETURNING {_ROW}
"""
# The operator's list of dead letters (the queue's admin job list, filtered on DEAD).
_DEAD_LETTERS = f"""
SELECT job_id, updated_at FROM job
WHERE status = {DEAD} AND updated_at < now() - make_interval(secs => $2)
  AND NOT (job_id = ANY($1::uuid[]))
ORDER BY updated_at DESC LIMIT 50
"""


@dataclass(frozen=True)
class Transition:
    """One committed change of a job row, as its RETURNING clause reported it."""

    kind: str  # enqueue | claim | renew | complete | fail | reap | requeue
    job_id: Any  # uuid.UUID in the job table
    job_type: int | str
    status: int
    attempts: int
    max_attempts: int
    worker_id: str | None
    created_at: datetime
    run_after: datetime
    run_started_at: datetime | None
    updated_at: datetime
    lease_until: datetime | None
    last_error: str | None
    result: Any  # decoded result jsonb (None unless DONE)

    @classmethod
    def from_row(cls, kind: str, row: asyncpg.Record) -> Transition:
        """Build a transition from a RETURNING row."""
        raw = row["result"]
        return cls(
            kind=kind,
            job_id=row["job_id"],
            job_type=row["job_type"],
            status=row["status"],
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            worker_id=row["worker_id"],
            created_at=row["created_at"],
            run_after=row["run_after"],
            run_started_at=row["run_started_at"],
            updated_at=row["updated_at"],
            lease_until=row["lease_until"],
            last_error=row["last_error"],
            result=json.loads(raw) if raw is not None else None,
        )


class JobQueue:
    """The queue's transitions on one asyncpg connection (in the caller's transaction, if any).

    The statements are class attributes, so a test can run the same machine on a table of
    another shape (tests/mapped_queue.py) by translating them.
    """

    ENQUEUE, CLAIM, RENEW, COMPLETE = _ENQUEUE, _CLAIM, _RENEW, _COMPLETE
    FAIL, REAP, REQUEUE, DEAD_LETTERS = _FAIL, _REAP, _REQUEUE, _DEAD_LETTERS

    @classmethod
    def job_type_of(cls, number: int) -> int | str:
        """The value the table stores for the fleet's job type ``number``."""
        return number

    @classmethod
    def new_id(cls) -> Any:
        """A fresh job_id, for jobs a hazard helper enqueues under an id it knows."""
        return uuid.uuid4()

    def __init__(self, conn: asyncpg.Connection, *, backoff_base: float = 5.0) -> None:
        self.conn = conn
        self.backoff_base = backoff_base

    async def enqueue(
        self,
        job_type: int,
        payload: Any = None,
        *,
        priority: int = 100,
        dedupe_key: str | None = None,
        max_attempts: int = 3,
        job_id: uuid.UUID | None = None,
    ) -> Transition | None:
        """Insert a pending job; None when an active job already holds the dedupe_key."""
        async with self.conn.transaction():
            row = await self.conn.fetchrow(
                self.ENQUEUE, job_id, self.job_type_of(job_type), priority,
                json.dumps(payload or {}), dedupe_key, max_attempts,
            )  # fmt: skip
            if row is None:
                return None
            # Wakes LISTENing workers at commit, as the queue does.
            await self.conn.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)
        return Transition.from_row("enqueue", row)

    async def claim(
        self,
        worker_id: str,
        lease_seconds: float,
        *,
        job_id: uuid.UUID | None = None,
        exclude: Collection[uuid.UUID] = (),
    ) -> Transition | None:
        """Take the next claimable pending job (or the given one); None when there is none."""
        row = await self.conn.fetchrow(self.CLAIM, worker_id, lease_seconds, job_id, list(exclude))
        return None if row is None else Transition.from_row("claim", row)

    async def renew(
        self, job_id: uuid.UUID, worker_id: str, lease_seconds: float
    ) -> Transition | None:
        """Push the lease forward; None when the worker no longer owns the job."""
        row = await self.conn.fetchrow(self.RENEW, job_id, worker_id, lease_seconds)
        return None if row is None else Transition.from_row("renew", row)

    async def complete(self, job_id: uuid.UUID, worker_id: str, result: Any) -> Transition | None:
        """Store the result and mark the job done; None when the worker no longer owns it."""
        row = await self.conn.fetchrow(self.COMPLETE, job_id, worker_id, json.dumps(result))
        return None if row is None else Transition.from_row("complete", row)

    async def fail(self, job_id: uuid.UUID, worker_id: str, error: str) -> Transition | None:
        """Retry after backoff, or dead-letter when attempts are used up; None when not owned."""
        row = await self.conn.fetchrow(
            self.FAIL, job_id, worker_id, error[:2000], self.backoff_base
        )
        return None if row is None else Transition.from_row("fail", row)

    async def reap(
        self, *, job_id: uuid.UUID | None = None, exclude: Collection[uuid.UUID] = ()
    ) -> list[Transition]:
        """Reclaim running jobs whose lease ran out (their worker died)."""
        rows = await self.conn.fetch(self.REAP, job_id, list(exclude))
        return [Transition.from_row("reap", row) for row in rows]

    async def requeue(self, job_id: uuid.UUID) -> Transition | None:
        """Put a dead job back to pending; None when it is not dead or its dedupe_key is taken."""
        try:
            async with self.conn.transaction():
                row = await self.conn.fetchrow(self.REQUEUE, job_id)
                if row is not None:
                    await self.conn.execute("SELECT pg_notify($1, '')", NOTIFY_CHANNEL)
        except asyncpg.UniqueViolationError:
            return None
        return None if row is None else Transition.from_row("requeue", row)

    async def dead_letters(
        self, exclude: Collection[uuid.UUID], older_than: float
    ) -> list[asyncpg.Record]:
        """Up to 50 dead jobs (job_id, updated_at), newest first, dead for ``older_than`` s."""
        return list(await self.conn.fetch(self.DEAD_LETTERS, list(exclude), older_than))


def split_sql(text: str) -> list[str]:
    """Split a file of simple statements (no semicolons inside them) after dropping -- comments."""
    code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    return [statement.strip() for statement in code.split(";") if statement.strip()]


async def prepare_database(dsn: str, *, exporter_indexes: bool = True) -> None:
    """Create the queue's table and indexes, and by default the exporter's, in a database."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SCHEMA_FILE.read_text())
        if exporter_indexes:
            # CREATE INDEX CONCURRENTLY refuses to run inside a transaction block, and a
            # multi-statement query string is one, so each statement goes on its own.
            for statement in split_sql(INDEXES_FILE.read_text()):
                await conn.execute(statement)
    finally:
        await conn.close()
