"""The enqueue window and the active-set diff: counting rows that are born active and end once.

django-tasks-db is the example: one row per task, READY -> RUNNING -> SUCCESSFUL or FAILED,
never back, and every time stamped by a client, not by the database. Each cycle reads the rows
enqueued since a bound the horizon moves (the *enqueue window*, through
:class:`~exporter.counting.terminal.TerminalCursor` with a clock margin), plus the rows the
previous snapshot showed active that are terminal now, by id (the *active-set diff*).
docs/exactness.md has the argument. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass, field

from exporter.model import Row


@dataclass
class Step:
    """What one snapshot changed, by row id, as :meth:`EnqueueWindow.step` found it."""

    enqueued: list[Row] = field(default_factory=list)  # new since the previous snapshot
    finished: list[Row] = field(default_factory=list)  # terminal for the first time
    deleted: set[str] = field(default_factory=set)  # were active, are gone without an end
    unexplained: set[str] = field(default_factory=set)  # active, yet found by neither read


@dataclass
class EnqueueWindow:
    """Exactly-once counting over rows that are inserted active and turn terminal once.

    Rows carry ``id``, ``status`` and the window's key (``enqueued_at``, Unix seconds).
    ``active`` holds every id the previous snapshot showed active; ``finished`` the terminal
    ids a later window can still return, with their key, so a row is counted once however many
    windows return it. Every row the previous snapshot did not show comes back in this cycle's
    window, so an active row found in neither is one the argument does not cover.
    """

    active_statuses: frozenset[str]
    active: set[str] = field(default_factory=set)
    finished: dict[str, float] = field(default_factory=dict)

    def absorb(self, rows: Iterable[Row], active_now: Set[str]) -> None:
        """The baseline: remember what the first snapshot shows without counting it."""
        self.active = set(active_now)
        self.finished = {
            str(row["id"]): float(row["enqueued_at"])
            for row in rows
            if str(row["status"]) not in self.active_statuses
        }

    def step(self, rows: Sequence[Row], active_now: Set[str]) -> Step:
        """Compare one snapshot's window and newly terminal rows with the previous snapshot."""
        out = Step()
        returned: set[str] = set()
        for row in rows:
            row_id = str(row["id"])
            returned.add(row_id)
            if row_id in self.finished:
                continue  # counted when a window first returned it
            if row_id not in self.active:
                out.enqueued.append(row)
            if str(row["status"]) not in self.active_statuses:
                out.finished.append(row)
                self.finished[row_id] = float(row["enqueued_at"])
        now = set(active_now)
        out.deleted = self.active - now - returned
        # A new row is in the window, and rows never go back from terminal to active.
        out.unexplained = (now - self.active - returned) | (now & self.finished.keys())
        self.active = now
        return out

    def forget(self, bound: float) -> None:
        """Drop the terminal ids that no window from ``bound`` on can return."""
        # A second of slack: the window compares timestamps in SQL, this compares floats, and
        # a row the window returns must never have been forgotten by a rounding difference.
        self.finished = {i: key for i, key in self.finished.items() if key >= bound - 1.0}
