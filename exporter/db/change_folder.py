"""The stream's thread side of counting: pgoutput messages of one table folded into batches.

Every committed change of the watched table is folded at once by the profile's rules
(:class:`~exporter.model.row_changes.ChangeFold`) into the open batch, which the event loop
takes whole (:meth:`Outlet.take`). So nothing per change crosses the thread boundary, and memory
follows the number of job types, not the rate, the interval or the size of one transaction.
Only the columns the rules read are decoded, and an UPDATE the rules call quiet (a claim, a
heartbeat) is dropped after reading its status alone.

A transaction is folded into a batch only at its Commit: the changes of an open transaction wait
in a short list, or, past :data:`SPILL` changes (a bulk update, a retention delete), in a tally of
their own, so a batch never holds part of a transaction (the slot is confirmed at commits only,
and a scrape must never carry half a transaction a successor would count again). A transaction
whose commit ends at or before ``skip_below`` was folded already (the server sends again what
was not confirmed when a stream reconnects) and is skipped.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from exporter.db.pgoutput import (
    UNCHANGED,
    PgoutputError,
    Relation,
    Truncate,
    Unchanged,
    Value,
    begin_lsn,
    begin_of,
    commit_of,
    decode,
    read_row,
    relation_of,
    value_at,
)
from exporter.model.change_tally import ChangeTally
from exporter.model.row_changes import (
    DELETE,
    INSERT,
    TRUNCATE,
    UPDATE,
    Batch,
    ChangeFold,
    RowChange,
)

# Changes of one open transaction kept as they came; past this they are folded into a tally of
# the transaction's own (memory stays flat through a 200,000-row UPDATE).
SPILL = 256
_BEGIN, _COMMIT, _INSERT, _UPDATE, _DELETE = (ord(c) for c in "BCIUD")
_OLD, _KEY, _NEW = (ord(c) for c in "OKN")
_CHANGES = frozenset((_INSERT, _UPDATE, _DELETE))
_OLD_ROWS = frozenset((_OLD, _KEY))


@dataclass(frozen=True)
class Gap:
    """Handed over in place of a batch: the slot was lost here, a new one follows."""

    slot: str
    found: str  # what was found, for the log line


@dataclass(frozen=True)
class _Layout:
    """A relation of the watched table: which columns to keep, by position."""

    names: tuple[str | None, ...]  # the kept columns' names; None: stepped over
    old: tuple[str | None, ...]  # the same, of those read from an UPDATE's old row
    keys: tuple[str | None, ...]  # the same, of the identity's columns only (a 'K' old row)
    status: int | None  # the status column's position (None: the relation does not send it)
    # How many columns ``names`` keeps, counted once per relation: an update's new row with
    # fewer had an unchanged TOASTed value left out.
    kept: int


class Outlet:
    """Where one stream run leaves what it folded, for the event loop to take."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Batch | Gap] = []
        self._batch: Batch | None = None

    def fold(
        self, fold: ChangeFold, changes: list[RowChange], at: float, end: int, quiet: int = 0
    ) -> None:
        """Fold one committed transaction's changes into the open batch (``quiet``: its changes
        that count nothing, read all the same)."""
        with self._lock:
            batch = self._open(fold)
            tally = batch.tally
            for change in changes:
                fold.count(change, at, tally)
            tally.changes += quiet
            batch.position, batch.commits = end, batch.commits + 1

    def advance(self, fold: ChangeFold, read: int, end: int) -> None:
        """One committed transaction whose changes all count nothing (claims, heartbeats): read,
        and a position the slot may be confirmed at, but no row to fold."""
        with self._lock:
            batch = self._open(fold)
            batch.tally.changes += read
            batch.position, batch.commits = end, batch.commits + 1

    def absorb(self, fold: ChangeFold, tally: ChangeTally, end: int) -> None:
        """Add one committed transaction folded apart (it was large) to the open batch."""
        with self._lock:
            batch = self._open(fold)
            batch.tally.absorb(tally)
            batch.position, batch.commits = end, batch.commits + 1

    def gap(self, gap: Gap) -> None:
        """Close the open batch and hand over the gap after it."""
        with self._lock:
            if self._batch is not None:
                self._items.append(self._batch)
                self._batch = None
            self._items.append(gap)

    def take(self) -> list[Batch | Gap]:
        """Everything folded since the last take, in commit order."""
        with self._lock:
            items, self._items = self._items, []
            if self._batch is not None:
                items.append(self._batch)
                self._batch = None
        return items

    def _open(self, fold: ChangeFold) -> Batch:
        if self._batch is None:
            self._batch = Batch(fold.tally(), 0)
        return self._batch


class TransactionFolder:
    """pgoutput messages into the outlet: the watched table's committed changes, folded."""

    def __init__(self, table: str, fold: ChangeFold, outlet: Outlet, skip_below: int) -> None:
        schema, _, name = table.rpartition(".")
        self._schema = schema.strip('"') or None
        self._name = name.strip('"')
        self.fold = fold
        self.outlet = outlet
        self.skip_below = skip_below  # commits ending at or before it were folded already
        self.delivered = 0  # the end of the last commit folded into the outlet
        self._layouts: dict[int, _Layout] = {}  # relations of the table only
        self._open = False
        self._skipping = False
        self._begin = b""  # the open transaction's Begin, read for its commit time when needed
        self._at: float | None = None  # that commit time, once read
        self._changes: list[RowChange] = []
        self._quiet = 0  # changes of the open transaction that count nothing
        self._spilled: ChangeTally | None = None

    @property
    def open(self) -> bool:
        """True between a Begin and its Commit."""
        return self._open

    def take(self, data: bytes) -> bool:
        """Take one message; True when it was a Commit (a transaction ended)."""
        kind = data[0] if data else -1
        # Most messages are a Begin, a Commit or a change, in that order of frequency.
        if kind == _BEGIN:
            # Begin's final LSN is where its commit record starts; a commit folded before
            # ended after that: this is the same transaction, sent again.
            self._skipping = begin_lsn(data) < self.skip_below
            self._open, self._begin, self._changes, self._quiet = True, data, [], 0
            self._spilled = self._at = None
            return False
        if kind == _COMMIT:
            self._commit(commit_of(data))
            return True
        if kind in _CHANGES:
            layout = self._layouts.get(relation_of(data))
            if layout is not None and not self._skipping:
                self._change(kind, data, layout)
            return False
        message = decode(data)  # the rare ones, checked whole
        if isinstance(message, Relation):
            self._relation(message)
        elif (
            isinstance(message, Truncate)
            and not self._skipping
            and any(r in self._layouts for r in message.relations)
        ):
            self._add(RowChange(TRUNCATE))
        return False

    def _commit(self, end: int) -> None:
        if self._skipping:
            pass
        elif self._spilled is not None:
            spilled = self._spilled
            spilled.changes += self._quiet
            for change in self._changes:
                self.fold.count(change, self._commit_time(), spilled)
            self.outlet.absorb(self.fold, spilled, end)
            self.delivered = self.skip_below = end
        elif self._changes:
            self.outlet.fold(self.fold, self._changes, self._commit_time(), end, self._quiet)
            self.delivered = self.skip_below = end
        elif self._quiet:
            self.outlet.advance(self.fold, self._quiet, end)
            self.delivered = self.skip_below = end
        self._open, self._changes, self._spilled = False, [], None

    def _relation(self, message: Relation) -> None:
        if message.name != self._name or self._schema not in (None, message.namespace):
            self._layouts.pop(message.oid, None)
            return
        wanted = self.fold.columns
        names = tuple(c if c in wanted else None for c in message.columns)
        keys = tuple(n if key else None for n, key in zip(names, message.keys, strict=True))
        read_old = self.fold.old_columns
        old = tuple(c if c in read_old else None for c in names)
        keys = tuple(c if c in read_old else None for c in keys)
        columns = message.columns
        status = columns.index(self.fold.status) if self.fold.status in columns else None
        kept = len(names) - names.count(None)
        self._layouts[message.oid] = _Layout(names, old, keys, status, kept)

    def _change(self, kind: int, data: bytes, layout: _Layout) -> None:
        if kind == _INSERT:
            if data[5] != _NEW:
                raise PgoutputError("an Insert without its new tuple")
            new, end = read_row(data, 6, layout.names)
            _done(data, end)
            self._add(RowChange(INSERT, new=new))
        elif kind == _UPDATE:
            self._update(data, layout)
        else:
            marker = data[5] if len(data) > 5 else -1
            if marker not in _OLD_ROWS:
                raise PgoutputError("a Delete without its old tuple")
            old, end = read_row(data, 6, layout.names if marker == _OLD else layout.keys)
            _done(data, end)
            self._add(RowChange(DELETE, old=old))

    def _update(self, data: bytes, layout: _Layout) -> None:
        marker = data[5] if len(data) > 5 else -1
        status = self.fold.status
        old: dict[str, str | None] | None = None
        if marker in _OLD_ROWS:
            old, new_at = read_row(data, 6, layout.old if marker == _OLD else layout.keys)
            if new_at >= len(data) or data[new_at] != _NEW:
                raise PgoutputError("an Update without its new tuple")
            new_at += 1
        elif marker == _NEW:
            new_at = 6
        else:
            raise PgoutputError("an Update without its new tuple")
        # The new status alone first: most updates (claims, heartbeats) count nothing, and
        # their new row is never read past it. An old key-only row without the status is
        # unknown; no old row at all means the identity's columns (the status) did not change.
        after: Value = UNCHANGED
        if layout.status is not None:
            after = value_at(data, new_at, layout.status)
        before = after if old is None else old.get(status, UNCHANGED)
        if (
            not isinstance(before, Unchanged)
            and not isinstance(after, Unchanged)
            and self.fold.quiet(before, after)
        ):
            self._quiet += 1  # read (rows_read counts it), nothing else
            return
        new, end = read_row(data, new_at, layout.names)
        _done(data, end)
        if marker == _OLD and len(new) < layout.kept:
            # An unchanged TOASTed value is sent as a marker, and left out; the whole old row
            # (FULL) has it, so read it whole this once (the old row read so far holds only
            # old_columns).
            new = {**read_row(data, 6, layout.names)[0], **new}
        self._add(RowChange(UPDATE, old=old, new=new))

    def _commit_time(self) -> float:
        if self._at is None:
            self._at = begin_of(self._begin)[1]
        return self._at

    def _add(self, change: RowChange) -> None:
        if self._spilled is not None:
            self.fold.count(change, self._commit_time(), self._spilled)
            return
        self._changes.append(change)
        if len(self._changes) > SPILL:
            self._spilled = self.fold.tally()
            at = self._commit_time()
            for kept in self._changes:
                self.fold.count(kept, at, self._spilled)
            self._changes = []


def _done(data: bytes, end: int) -> None:
    if end != len(data):
        raise PgoutputError(f"{len(data) - end} bytes left after the message")
