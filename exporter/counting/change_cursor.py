"""The change cursor: which rows a cycle reads, so each change is read about once and none is lost.

Before its snapshot a cycle reads, in autocommit, the *horizon* ``H``: the start time of the
oldest transaction still open in this database (``pg_stat_activity.xact_start``), or now().
Every change the cycle's snapshot does not show yet comes from a transaction that started at
or after ``H``, and the queue stamps ``updated_at = now()``, its transaction's start time. So
no row can ever appear with ``updated_at`` below ``H``: the cycle may read the rows below
``H - TIMESTAMP_MARGIN`` (horizon.py says why 0.25 s) and move the cursor past them for good.
The cursor is a keyset position ``(updated_at, job_id)``, read forward in bounded chunks;
rows at or above the bound are counted when seen (they are visible) but the cursor stops at
the bound, so they are read again and recognised. A long transaction elsewhere holds ``H``
back: the reads past the bound go on from ``ahead`` meanwhile, so the counters are not late
either; only forgetting waits. Timestamps, not transaction ids, so xid wraparound cannot
move the cursor. See docs/exactness.md for the whole argument.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from exporter.counting.horizon import TIMESTAMP_MARGIN, Horizon
from exporter.model import NIL

# The chunks' upper bound: the rows above the cycle's bound are read as well (see chunk()).
FOREVER = datetime(9999, 12, 31, tzinfo=UTC)


Key = tuple[datetime, str]


class ChangeCursor:
    """Keyset cursor over ``(updated_at, job_id)`` bounded by the horizon; no I/O."""

    def __init__(
        self, *, tolerance: float, max_rows: int, margin: float = TIMESTAMP_MARGIN
    ) -> None:
        self.tolerance = tolerance  # used only when other sessions are hidden from this role
        self.max_rows = max_rows
        self.margin = margin
        self.key: Key | None = None  # everything at or below it has been read
        self.end: datetime | None = None  # exclusive upper bound of this cycle's reads
        self.origin: datetime | None = None  # the baseline's bound: older rows are history
        self.horizon: Horizon[datetime] | None = None
        # The last row read above the bound: rows up to it were read while visible, so the
        # next cycle's reads past the bound start after it (see chunk()).
        self.ahead: Key | None = None
        self._past_bound = False  # this cycle's reads have reached the bound
        self._writers: datetime | None = None  # the previous horizon's writers_bound
        self.caught_up = True
        self.rows_read = 0  # in total, for jobqueue_exporter_rows_read_total

    @property
    def started(self) -> bool:
        """True once a baseline fixed the cursor's start."""
        return self.key is not None

    def plan(self, horizon: Horizon[datetime]) -> None:
        """Fix this cycle's upper bound from the horizon read just before the snapshot."""
        self.horizon = horizon
        self.caught_up = True
        bound = horizon.lower_bound
        if horizon.hidden:
            # Sessions we cannot see may hold older transactions: fall back to the time tolerance.
            assert horizon.now is not None
            bound = min(bound, horizon.now - timedelta(seconds=self.tolerance))
        end = bound - timedelta(seconds=self.margin)
        if self.end is not None:
            if horizon.prepared:
                # A prepared transaction left pg_stat_activity when it was prepared; the last
                # bound taken while it was still a session is still below its start.
                end = self.end
            # Never step back (the margin absorbs the microseconds a step back could be).
            end = max(end, self.end)
        self.end = end
        self._rewind_ahead(horizon)
        # A cursor already at the bound has nothing below it to read this cycle.
        self._past_bound = self.key is not None and self.key[0] >= end
        if self.key is None:
            # The baseline: rows below this are history, counted from the next change on.
            self.origin = end
            self.key = (end, NIL)

    def chunk(self) -> tuple[datetime, str, datetime, int] | None:
        """Arguments of the next ``changes_after`` query, or None before the baseline.

        The query has no upper bound: rows at or above the bound are visible already, so the
        counters need not wait for the horizon. Below the bound, the cursor reads from its
        key; once it has reached the bound, reading goes on from ``ahead``, the last row read
        above it, so a long transaction holding the horizon back delays no count: every
        change that has become visible is read once per cycle it appears in. The cursor
        itself stops at the bound; when the horizon moves, it sweeps the held region once,
        reading what ``ahead`` passed again (recognised) and what committed late (counted).
        """
        if self.key is None or self.end is None:
            return None
        start = self.key
        if self._past_bound and self.ahead is not None:
            start = max(start, self.ahead)
        return (start[0], start[1], FOREVER, self.max_rows)

    def _rewind_ahead(self, horizon: Horizon[datetime]) -> None:
        # A transaction that had written when the horizon was read may commit rows stamped
        # with its start, below ahead: the reads past the bound start from there again, so a
        # late commit is read in the next cycle. One that has not written yet and then writes
        # is found by the cursor's sweep once the horizon moves (docs/exactness.md).
        # The previous horizon's writers count too: one of them may have committed since, and
        # the current horizon no longer lists it.
        previous, self._writers = self._writers, horizon.writers_bound
        if self.ahead is None:
            return
        writers = horizon.writers_bound
        if writers is None or previous is None or horizon.hidden:
            self.ahead = None  # no such bound: read everything past the bound again
            return
        soft = (min(writers, previous) - timedelta(seconds=self.margin), NIL)
        self.ahead = min(self.ahead, soft)

    def took(self, keys: list[Key]) -> bool:
        """Advance past a chunk of rows (their keys, in order); True when more may follow."""
        assert self.end is not None
        self.rows_read += len(keys)
        above = keys
        if not self._past_bound:
            below = [k for k in keys if k[0] < self.end]
            if below:
                self.key = below[-1]
            if len(below) == len(keys) == self.max_rows:
                self.caught_up = False
                return True
            # Everything below the bound has been read: jump to it, so the lag shows the
            # horizon's age only; what lies above is read from ahead on.
            if self.key is None or self.key[0] < self.end:
                self.key = (self.end, NIL)
            self._past_bound = True
            above = keys[len(below) :]
        if above and (self.ahead is None or above[-1] > self.ahead):
            self.ahead = above[-1]
        self.caught_up = len(keys) < self.max_rows
        return not self.caught_up

    def floor(self) -> float | None:
        """Unix time below which no row will be read again (settled rows can be forgotten)."""
        return self.key[0].timestamp() if self.key is not None else None

    def lag(self) -> float:
        """Seconds between the snapshot's now() and the cursor: how far behind the reads are."""
        if self.key is None or self.horizon is None or self.horizon.now is None:
            return 0.0
        return max(0.0, (self.horizon.now - self.key[0]).total_seconds())
