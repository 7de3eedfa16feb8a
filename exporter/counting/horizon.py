"""The late-commit horizon: which rows a cycle may count, proven from the database's own state.

Every cycle starts with one short autocommit statement (the *horizon*, run before the cycle's
snapshot) that reads, in this order: the lower bound ``L`` = min(now(), ``xact_start`` of every
other backend of this database that is inside a transaction); how many prepared transactions
exist; and, for id cursors, the largest id visible right then (``last_id``) followed by
``clock_timestamp()`` (``read_at``, taken after the id was read). Why that is enough:

* A transaction that was running at the horizon started at or after ``L``; one that had not
  started yet starts later still. So every write that is not yet committed when a cycle takes
  its snapshot was made by a transaction that started at or after that cycle's ``L``.
* A sequence with CACHE 1 (the default; checked every cycle) only grows across sessions, so
  an id handed out after ``read_at`` is larger than ``last_id``.
  Hence once a later cycle's ``L`` is past a point's ``read_at``, every transaction that could
  still hold an id <= that point's ``last_id`` has ended, and that cycle's snapshot shows all of
  them: the id range up to ``last_id`` is *settled* and a watermark can move there.
* A prepared (two-phase) transaction is invisible to ``pg_stat_activity``, so while one exists
  the watermark stays where it is.

Both facts rest on the server's clock and on every writer of the tables being a backend of the
same database, which is how PostgreSQL works; see docs/presets.md for the full argument.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar

from exporter.model import CountingError, Row
from exporter.vocabulary import PERMISSION

# pg_stat_activity's xact_start is published a few microseconds after the transaction takes
# its start timestamp, so every bound the horizon gives now()-stamped columns (the default
# profile's change cursor, the presets' terminal-state windows) keeps this much slack. 0.25 s
# is thousands of times those microseconds, and as much as a server clock stepped back may
# cost (NTP slews offsets under 128 ms); more would only re-read more rows: the change cursor
# reads again the rows of the last margin each cycle (bench/RESULTS.md measured it at 0.25 s).
TIMESTAMP_MARGIN = 0.25
T = TypeVar("T", datetime, float)
# xid8 values are 64-bit; row xmins are their low 32 bits.
XID_MODULUS = 1 << 32


@dataclass(frozen=True)
class Horizon(Generic[T]):
    """What the autocommit horizon statement read: timestamps (``datetime``) for the transition
    cursor over ``updated_at``, Unix seconds (``float``) for the presets' cursors."""

    lower_bound: T  # least(now(), xact_start of every other open transaction)
    prepared: int  # prepared (two-phase) transactions: invisible to pg_stat_activity
    hidden: int = 0  # sessions of this database whose xact_start this role may not read
    now: T | None = None
    last_id: int | None = None
    read_at: float | None = None
    # least(now(), xact_start of every other transaction that has written): the transition
    # cursor re-reads past its held bound from here (exporter/counting/change_cursor.py).
    writers_bound: T | None = None

    @staticmethod
    def of_timestamps(row: Row) -> Horizon[datetime]:
        """Parse the default profile's ``horizon`` row; hidden sessions are allowed (the cursor
        falls back to collect.commit_lag_tolerance)."""
        return Horizon(
            lower_bound=row["lower_bound"],
            prepared=int(row["prepared"]),
            hidden=int(row["hidden"]),
            now=row["now"],
            writers_bound=row.get("writers_bound"),
        )

    @staticmethod
    def from_row(row: Row) -> Horizon[float]:
        """Parse a preset's horizon row; refuse when other sessions are hidden from this role."""
        if int(row["hidden"]):
            raise CountingError(
                f"{row['hidden']} sessions of this database are hidden in pg_stat_activity: "
                "the late-commit horizon needs the pg_read_all_stats (or pg_monitor) role",
                reason=PERMISSION,
            )
        cache = row.get("id_cache")
        if cache is not None and int(cache) > 1:
            # With CACHE n each session hands out ids from its own block, so a later insert
            # can carry a lower id than one already visible: the id cursor would skip it.
            raise CountingError(f"the event id sequence caches {cache} values; it must cache 1")
        last_id = row.get("last_id")
        read_at = row.get("read_at")
        return Horizon(
            lower_bound=float(row["lower_bound"]),
            prepared=int(row["prepared"]),
            last_id=int(last_id) if last_id is not None else None,
            read_at=float(read_at) if read_at is not None else None,
        )


@dataclass
class IdWatermark:
    """Exactly-once consumption of an append-only table keyed by a sequence-fed id.

    Ids at or below ``watermark`` are settled (every one that will ever be visible has been
    consumed); above it, ``consumed`` remembers which ids were already counted. The key is the
    id, never the row version, because a library may UPDATE its log rows (pgqueuer sets
    ``aggregated``), which gives an old event a new xmin.
    """

    watermark: int | None = None
    consumed: set[int] = field(default_factory=set)
    points: list[tuple[float, int]] = field(default_factory=list)  # (read_at, last_id)
    horizon: Horizon[float] | None = None

    def note(self, horizon: Horizon[float]) -> None:
        """Remember this cycle's horizon and its (read_at, last_id) point."""
        self.horizon = horizon
        if horizon.read_at is not None:
            self.points.append((horizon.read_at, horizon.last_id or 0))

    def settled(self) -> int | None:
        """The largest last_id that this cycle's horizon proves settled, if any."""
        horizon = self.horizon
        if horizon is None or horizon.prepared:
            return None
        usable = [last_id for read_at, last_id in self.points if read_at < horizon.lower_bound]
        return max(usable) if usable else None

    def lower_id(self) -> int | None:
        """The exclusive lower bound of this cycle's id range; None means "do not read yet"."""
        if self.watermark is not None:
            return self.watermark
        return self.settled()  # the baseline cycle starts from the first settled point

    def fresh(self, event_id: int) -> bool:
        """Whether an event is seen for the first time (and remember it as consumed)."""
        if (self.watermark is not None and event_id <= self.watermark) or event_id in self.consumed:
            return False
        self.consumed.add(event_id)
        return True

    def absorb(self, event_ids: Iterable[int]) -> None:
        """Mark events as consumed without counting them (the baseline)."""
        self.consumed.update(event_ids)

    def advance(self) -> None:
        """Move the watermark to the newest settled point and forget what it covers."""
        target = self.settled()
        if target is None:
            return
        if self.watermark is None or target > self.watermark:
            self.watermark = target
            self.consumed = {i for i in self.consumed if i > target}
        # Points older than the bound are spent: their last_id is at or below the watermark.
        bound = self.horizon.lower_bound if self.horizon is not None else 0.0
        self.points = [p for p in self.points if p[0] >= bound]


@dataclass(frozen=True)
class TxidSnapshot:
    """A parsed pg_snapshot: xmin, xmax and the in-progress top-level xids."""

    xmin: int
    xmax: int
    xip: frozenset[int]

    @classmethod
    def parse(cls, text: str) -> TxidSnapshot:
        """Parse the text form 'xmin:xmax:xip,xip,...'."""
        xmin, xmax, xip = text.split(":")
        return cls(int(xmin), int(xmax), frozenset(int(x) for x in xip.split(",") if x))

    def surely_visible(self, xid: int) -> bool:
        """Whether a committed version with this xid was certainly visible in the snapshot."""
        return xid < self.xmin

    def surely_invisible(self, xid: int) -> bool:
        """Whether a version with this xid was certainly not visible in the snapshot.

        Between xmin and xmax, an xid missing from xip is either a top-level transaction that
        had committed (visible) or a subtransaction of one still running (invisible: the xip
        list names top-level xids only, which is also why pg_visible_in_snapshot() answers
        "visible" for it). Such versions are "maybe seen"; callers de-duplicate them.
        """
        return xid >= self.xmax or xid in self.xip


def widen_xid(xid32: int, reference: int) -> int:
    """The xid8 whose low 32 bits are ``xid32``, at or below ``reference`` (a current xid8)."""
    return reference - ((reference - xid32) % XID_MODULUS)
