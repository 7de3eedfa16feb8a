"""The change cursor alone: bounds from the horizon, chunks, catch-up, fallbacks (no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from exporter.counting.change_cursor import FOREVER, ChangeCursor
from exporter.counting.horizon import TIMESTAMP_MARGIN as MARGIN
from exporter.counting.horizon import Horizon
from exporter.model import NIL

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def horizon(
    now: float,
    lower: float | None = None,
    hidden: int = 0,
    prepared: int = 0,
    writers: float | None = None,
) -> Horizon[datetime]:
    return Horizon(
        lower_bound=at(now if lower is None else lower),
        prepared=prepared,
        hidden=hidden,
        now=at(now),
        writers_bound=at(now if writers is None else writers),
    )


def test_the_baseline_starts_the_cursor_at_the_bound_below_the_oldest_transaction() -> None:
    feed = ChangeCursor(tolerance=30.0, max_rows=10)
    feed.plan(horizon(100.0, lower=90.0))
    assert feed.key == (at(90.0 - MARGIN), NIL)
    assert feed.origin == at(90.0 - MARGIN)


def test_a_backlog_is_read_in_chunks_and_reported_behind_until_the_bound() -> None:
    feed = ChangeCursor(tolerance=30.0, max_rows=2)
    feed.plan(horizon(100.0))
    feed.plan(horizon(200.0))
    assert feed.chunk() == (at(100.0 - MARGIN), NIL, FOREVER, 2)
    assert feed.took([(at(110.0), "a"), (at(120.0), "b")]) is True
    assert feed.chunk() == (at(120.0), "b", FOREVER, 2)
    assert not feed.caught_up
    assert feed.lag() == 80.0
    assert feed.took([(at(150.0), "c")]) is False
    assert feed.caught_up
    assert feed.key == (at(200.0 - MARGIN), NIL)
    assert feed.rows_read == 3


def test_rows_above_the_bound_are_read_once_while_the_cursor_waits_at_the_bound() -> None:
    feed = ChangeCursor(tolerance=30.0, max_rows=3)
    feed.plan(horizon(100.0))
    feed.plan(horizon(160.0, lower=101.0))  # a transaction open since 101 holds the bound
    assert feed.end == at(101.0 - MARGIN)
    assert feed.took([(at(100.5), "a"), (at(130.0), "b"), (at(150.0), "c")]) is True
    assert feed.key == (at(101.0 - MARGIN), NIL)  # b and c will be read again, once
    assert not feed.caught_up
    assert feed.chunk() == (at(150.0), "c", FOREVER, 3)  # every visible change, this cycle
    assert feed.took([(at(155.0), "d")]) is False
    assert feed.caught_up
    # Still held: the next cycle reads only what is new past d, never the held region again.
    feed.plan(horizon(220.0, lower=101.0))
    assert feed.chunk() == (at(155.0), "d", FOREVER, 3)
    assert feed.took([]) is False
    assert feed.lag() >= 119.0
    # A transaction that has written since 152 may commit rows stamped then: re-read from there.
    feed.plan(horizon(225.0, lower=101.0, writers=152.0))
    assert feed.chunk() == (at(152.0 - MARGIN), NIL, FOREVER, 3)
    assert feed.took([(at(152.0), "late"), (at(155.0), "d")]) is False
    # Without the writers' bound (hidden sessions), everything past the bound is read again.
    feed.plan(horizon(226.0, lower=101.0, hidden=1))
    assert feed.chunk() == (at(101.0 - MARGIN), NIL, FOREVER, 3)
    assert feed.took([(at(130.0), "b")]) is False
    # The transaction ends: the cursor sweeps the held region once, from where it waited
    # (late commits in it are found now), up to the new bound.
    feed.plan(horizon(230.0))
    assert feed.chunk() == (at(101.0 - MARGIN), NIL, FOREVER, 3)
    assert feed.took([(at(130.0), "b"), (at(150.0), "c"), (at(152.0), "late")]) is True
    assert feed.chunk() == (at(152.0), "late", FOREVER, 3)
    assert feed.took([(at(155.0), "d")]) is False
    assert feed.key == (at(230.0 - MARGIN), NIL)


def test_hidden_sessions_fall_back_to_the_tolerance() -> None:
    feed = ChangeCursor(tolerance=30.0, max_rows=100)
    feed.plan(horizon(100.0, hidden=2))
    assert feed.end == at(70.0 - MARGIN)


def test_a_prepared_transaction_freezes_the_bound_and_the_bound_never_steps_back() -> None:
    feed = ChangeCursor(tolerance=30.0, max_rows=100)
    feed.plan(horizon(100.0))
    feed.plan(horizon(150.0, prepared=1))
    assert feed.end == at(100.0 - MARGIN)
    feed.plan(horizon(160.0))
    assert feed.end == at(160.0 - MARGIN)
    feed.plan(horizon(170.0, lower=120.0))  # an older transaction seen late: no step back
    assert feed.end == at(160.0 - MARGIN)
