"""The django-tasks preset's per-cycle cost on about 1,000,000 results (see explain.py).

The table is the one `migrate` creates; the history is generated into it, the preset's
indexes are built, and a few hundred tasks land between cycles: some finish before the next
cycle (the enqueued_at window finds them), some wait (the active set), some of the waiting
ones finish (the primary-key lookups). Run the figures docs/presets.md quotes with:
    .venv/bin/python -m tests.system.presets.explain django-tasks
"""

from __future__ import annotations

from tests.system.presets.explain import Measurement, measure

TABLE = "django_tasks_database_dbtaskresult"
_COLUMNS = (
    "id, status, enqueued_at, started_at, finished_at, args_kwargs, priority, task_path, "
    "worker_ids, queue_name, backend_name, run_after, return_value, exception_class_path, "
    "traceback"
)
_NO_RUN_AFTER = "'9999-01-01 00:00:00+00'"


def _rows(count: str, status: str, enqueued: str, started: str, finished: str,
          exception: str = "''") -> str:  # fmt: skip
    return (
        f"INSERT INTO {TABLE} ({_COLUMNS}) "
        f"SELECT gen_random_uuid(), {status}, {enqueued}, {started}, {finished}, "
        f"'{{\"args\": [], \"kwargs\": {{}}}}', 0, 'app.tasks.task_' || (g % 20), '[]', "
        f"'default', 'default', {_NO_RUN_AFTER}, NULL, {exception}, '' "
        f"FROM generate_series(1, {count}) g"
    )


_WEEK = "now() - interval '7 days' + g * interval '0.5 s'"
HISTORY = [
    # A week of finished tasks, one in fifty failed.
    _rows(
        "$1::int",
        "CASE WHEN g % 50 = 0 THEN 'FAILED' ELSE 'SUCCESSFUL' END",
        _WEEK,
        f"{_WEEK} + interval '1 s'",
        f"{_WEEK} + interval '2 s'",
    ),
    _rows("2000", "'READY'", "now() - interval '10 minutes'", "NULL", "NULL"),
    _rows("50", "'RUNNING'", "now() - interval '5 minutes'", "now() - interval '1 minute'", "NULL"),
]
BATCH = [
    # Enqueued and finished between two cycles: only the window can find these.
    _rows("100", "'SUCCESSFUL'", "now()", "now()", "now()"),
    _rows("10", "'FAILED'", "now()", "now()", "now()", "'builtins.ValueError'"),
    _rows("100", "'READY'", "now()", "NULL", "NULL"),
    # Waiting tasks that finish: found by primary key, as the previous cycle saw them active.
    f"""UPDATE {TABLE} SET status = 'SUCCESSFUL', started_at = now(), finished_at = now()
        WHERE id IN (SELECT id FROM {TABLE} WHERE status = 'READY' LIMIT 50)""",
]


def index_statements() -> list[str]:
    """The shipped index file as plain CREATE INDEX statements, for a history load."""
    from tests.system.presets.django_harness import INDEX_FILE

    code = "\n".join(
        line for line in INDEX_FILE.read_text().splitlines() if not line.startswith("--")
    )
    return [s.replace(" CONCURRENTLY", "") for s in code.split(";") if s.strip()]


async def measure_django_tasks(dsn: str) -> Measurement:
    """The django-tasks figures: `migrate`, the history, the shipped indexes, the cycles."""
    from tests.system.presets.django_harness import install

    install(dsn)
    history = [*HISTORY, *index_statements()]
    return await measure(dsn, "django-tasks", history, BATCH, (TABLE,))
