"""The tasks of the ground-truth workload: they succeed, fail, wait for their time, or hang."""

from __future__ import annotations

import time

from django_tasks import task


class BoomError(Exception):
    """A failure of the project's own kind, so two exception classes are recorded."""


@task()
def ok(n: int) -> int:
    """Succeeds at once."""
    return n


@task()
def bad(n: int) -> None:
    """Fails with a built-in exception."""
    raise ValueError(f"bad {n}")


@task()
def boom(n: int) -> None:
    """Fails with the project's own exception."""
    raise BoomError(n)


@task()
def later(n: int) -> int:
    """Enqueued with run_after a few seconds ahead."""
    return n


@task()
def slow() -> None:
    """Runs until its worker is killed."""
    time.sleep(3600)


@task()
def parked(n: int) -> int:
    """Enqueued with run_after an hour ahead: it stays READY through the test."""
    return n
