"""The queue table's change stream: a pgoutput slot read over the streaming replication protocol.

asyncpg does not speak the replication protocol, so psycopg2's LogicalReplicationConnection
(the optional extra ``logical``) reads the slot in a thread of its own. A walsender decodes each
WAL record once and keeps its reorder buffer between messages; the SQL functions
(``pg_logical_slot_get_binary_changes``) would decode again from the slot's restart_lsn on
every call, which behind a long transaction grows without bound (docs/logical.md). The thread
hands each committed transaction of the table to the event loop whole, in commit order, and
confirms the slot only as far as the event loop says (:meth:`ChangeStream.confirm`): the end of
the last commit whose counts a /metrics response carried. A slot found invalidated, or gone
after this process read from it, is a gap (:class:`Gap`): the thread replaces it with a new one
and says so in the queue, where the counting mode takes a new baseline (docs/logical.md, "Gaps").
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import select
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter.db.pgoutput import (
    UNCHANGED,
    Begin,
    Commit,
    Delete,
    Insert,
    Relation,
    Truncate,
    Update,
    Value,
    decode,
)
from exporter.db.pool import DatabaseError
from exporter.model.row_changes import DELETE, INSERT, TRUNCATE, UPDATE, RowChange, Transaction

log = logging.getLogger(__name__)

EXTRA_HINT = "collect.counting: logical needs psycopg2: pip install 'jobqueue-exporter[logical]'"
# How often the confirmed position is sent even when it did not move: the server's
# wal_sender_timeout (60 s by default) ends a replication connection that stays silent.
FEEDBACK_EVERY = 5.0
WAIT = 0.5  # seconds the thread sleeps on the socket before it looks at its stop flag again
# Transactions handed over but not drained yet, past which the thread stops reading until the
# event loop catches up: the server keeps the rest (the slot's WAL, bounded by
# max_slot_wal_keep_size) instead of this process's memory.
MAX_BUFFERED = 50_000
# The walsender formats values with the session's settings: ISO times in UTC, exact floats.
SESSION_OPTIONS = "-c DateStyle=ISO -c TimeZone=UTC -c extra_float_digits=3"
LOST = "lost"  # pg_replication_slots.wal_status of an invalidated slot
# What START_REPLICATION says of an invalidated slot, SQLSTATE 55000: PostgreSQL 15 "cannot
# read from logical replication slot" with DETAIL "This slot has been invalidated because ..."
# (measured; the connection stays usable), 13 and 14 "can no longer get changes ...".
INVALIDATED = ("can no longer get changes", "has been invalidated")


def psycopg2_modules() -> tuple[Any, Any]:
    """psycopg2 and psycopg2.extras, or DatabaseError naming the extra that installs them."""
    try:
        import psycopg2
        import psycopg2.extras
    except ImportError:
        raise DatabaseError("schema", EXTRA_HINT) from None
    return psycopg2, psycopg2.extras


@dataclass(frozen=True)
class Gap:
    """Handed over in place of a transaction: the slot was lost here, a new one follows."""

    slot: str
    found: str  # what was found, for the log line


@dataclass(frozen=True)
class StreamOptions:
    """Where the stream reads: the DSN, the slot, the publication and the table's name."""

    dsn: str
    slot: str
    publication: str
    table: str  # schema-qualified or bare, as database.table says
    connect_timeout: float = 5.0


class ChangeStream:
    """One replication connection in one thread, feeding committed transactions to a queue."""

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._queue: queue.SimpleQueue[Transaction | Gap] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: DatabaseError | None = None
        # Written by the event loop, read by the thread (an int assignment is atomic).
        self._confirm = 0
        # Read by the event loop (for metrics to come: lag, retained WAL).
        self.server_lsn = 0  # the server's WAL position as last reported to the stream
        self.confirmed_lsn = 0  # the position last sent as flushed
        self.created_slot = False  # True when this stream created its slot
        self._delivered_end = 0  # end of the last transaction handed to the queue
        self.gaps = 0  # slots found lost and replaced, in this process
        self._known = False  # the slot existed while this process read it: gone now is a gap
        self._lock = threading.Lock()  # a gap's reset against the event loop's confirm
        # Called on the thread after each feedback, with the position it confirmed: a scrape
        # waits for it before its response leaves (db/slot_follower.py, Follower.served).
        self.on_feedback: Callable[[int], None] | None = None
        # The event loop wakes the thread through this pipe, so a position to confirm leaves
        # at once instead of after the thread's next sleep on a quiet socket.
        self._wake_read, self._wake_write = os.pipe()
        for fd in (self._wake_read, self._wake_write):
            os.set_blocking(fd, False)
        weakref.finalize(self, _close, self._wake_read, self._wake_write)

    @property
    def running(self) -> bool:
        """True while the thread reads (or connects)."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start reading in a new thread (psycopg2 must be importable)."""
        psycopg2_modules()
        self._stop.clear()
        self._error = None
        self._thread = threading.Thread(
            target=self._run, name=f"logical {self.options.slot}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and close its connection; what was not drained is dropped (it was
        not confirmed, so the next reader of the slot gets it again)."""
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout)
        self._thread = None
        self._queue = queue.SimpleQueue()

    def drain(self) -> list[Transaction | Gap]:
        """Every transaction received since the last drain, in commit order, and a Gap where the
        slot was replaced; DatabaseError once the thread has stopped on an error (after the
        transactions it delivered)."""
        out: list[Transaction | Gap] = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                break
        if not out and self._error is not None and not self.running:
            raise self._error
        return out

    def confirm(self, lsn: int, gaps: int = 0) -> None:
        """Let the slot be confirmed up to ``lsn`` (the end of a counted, scraped commit);
        ignored unless the caller has taken all ``gaps`` (its position is of a lost slot)."""
        with self._lock:
            if gaps != self.gaps:
                return
            self._confirm = max(self._confirm, lsn)
        if lsn > self.confirmed_lsn:
            self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # full: the thread is woken already
            os.write(self._wake_write, b"\0")

    # --- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        psycopg2, extras = psycopg2_modules()
        try:
            conn = psycopg2.connect(
                self.options.dsn,
                connection_factory=extras.LogicalReplicationConnection,
                connect_timeout=max(1, round(self.options.connect_timeout)),
                options=SESSION_OPTIONS,
            )
        except psycopg2.Error as exc:
            self._error = DatabaseError("connection", _first_line(exc))
            return
        try:
            cur = conn.cursor()
            self._ensure_slot(psycopg2, cur)
            try:
                self._start_replication(cur)
            except psycopg2.errors.ObjectNotInPrerequisiteState as exc:
                # Invalidated between the check and the start (or by a server that reports it
                # only here): the same gap as a slot found lost.
                if not any(text in str(exc) for text in INVALIDATED):
                    raise
                self._replace(cur, f"START_REPLICATION refused: {_first_line(exc)}", drop=True)
                self._create(psycopg2, cur)
                self._start_replication(cur)
            self._read(cur)
        except psycopg2.Error as exc:
            self._error = DatabaseError("query", _first_line(exc))
        except Exception as exc:  # a message the decoder refuses: stop, say so
            log.exception("logical stream failed")
            self._error = DatabaseError("internal", f"{type(exc).__name__}: {exc}")
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    def _start_replication(self, cur: Any) -> None:
        cur.start_replication(
            slot_name=self.options.slot,
            decode=False,
            options={"proto_version": "1", "publication_names": self.options.publication},
        )

    def _ensure_slot(self, psycopg2: Any, cur: Any) -> None:
        # Created when missing, never dropped here unless the server invalidated it: a slot
        # keeps the position of what was counted and scraped, which a restarted or standby
        # exporter resumes from. A missing slot is a gap only when this process saw it before:
        # at the first start nothing tells a slot never made from one lost with a failover.
        slot = self.options.slot
        cur.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        row = cur.fetchone()
        if row is not None and row[0] != LOST:
            self._known = True
            return
        if row is not None:
            self._replace(cur, "wal_status lost (invalidated: the server removed WAL it needs)",
                          drop=True)  # fmt: skip
        elif self._known:
            self._replace(cur, "the slot is gone (dropped, or lost with a failover)", drop=False)
        self._create(psycopg2, cur)

    def _create(self, psycopg2: Any, cur: Any) -> None:
        # Creation waits until every transaction open now has ended, a prepared one included
        # (counting starts after them: they are history, as before polling's baseline).
        log.info(
            "creating the replication slot; it waits for the transactions open now to end",
            extra={"fields": {"slot": self.options.slot}},
        )
        try:
            cur.create_replication_slot(self.options.slot, output_plugin="pgoutput")
        except psycopg2.errors.DuplicateObject:
            self._known = True
            return  # another exporter created it meanwhile
        self.created_slot = self._known = True
        log.info("replication slot created", extra={"fields": {"slot": self.options.slot}})

    def _replace(self, cur: Any, found: str, *, drop: bool) -> None:
        """Count a gap: drop the lost slot (it can never be read again), reset every position
        (they are the old slot's), and tell the event loop, which takes a new baseline."""
        slot = self.options.slot
        if drop:
            cur.drop_replication_slot(slot)
        log.warning(
            "replication slot lost: counting goes on from a new slot; the transitions in "
            "between are in no counter (a gap is counted)",
            extra={"fields": {"slot": slot, "found": found}},
        )
        with self._lock:
            self.gaps += 1
            self._confirm = self.confirmed_lsn = self.server_lsn = self._delivered_end = 0
        # Counted once: should creating the new slot fail, the next try finds none and only
        # creates it.
        self._known = False
        self._queue.put(Gap(slot, found))

    def _read(self, cur: Any) -> None:
        reader = TransactionReader(self.options.table)
        sent_at = 0.0
        while not self._stop.is_set():
            if self._queue.qsize() >= MAX_BUFFERED:
                now = time.monotonic()
                if self._target(reader, idle=False) > self.confirmed_lsn or (
                    now - sent_at >= FEEDBACK_EVERY
                ):
                    self._feedback(cur, reader, idle=False)
                    sent_at = now
                self._sleep()
                continue
            message = cur.read_message()
            if message is not None:
                done = reader.take(decode(message.payload))
                if done is not None and done.changes:
                    self._queue.put(done)
                    self._delivered_end = done.end_lsn
            else:
                self.server_lsn = max(self.server_lsn, int(cur.wal_end))
            now = time.monotonic()
            # Also while messages keep coming: a busy stream must still tell the server it
            # lives, and how far it may let go.
            if self._target(reader, idle=message is None) > self.confirmed_lsn or (
                now - sent_at >= FEEDBACK_EVERY
            ):
                self._feedback(cur, reader, idle=message is None)
                sent_at = now
            if message is None:
                self._sleep(cur)
        # Stopping (a standby now, or shutting down): what the event loop allowed last is
        # confirmed, so a successor does not count again what a scrape already carried.
        self._feedback(cur, reader, idle=False)

    def _sleep(self, *sockets: Any) -> None:
        """Wait for the server (when given its cursor), a wake-up from the event loop, or WAIT."""
        select.select([*sockets, self._wake_read], [], [], WAIT)
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_read, 64):
                pass

    def _target(self, reader: TransactionReader, *, idle: bool) -> int:
        target = self._confirm
        if idle and target >= self._delivered_end and not reader.open:
            # Everything handed over is counted and carried: the WAL since holds nothing of
            # the table's, so a quiet table never pins the WAL of busy ones.
            target = max(target, self.server_lsn)
        return target

    def _feedback(self, cur: Any, reader: TransactionReader, *, idle: bool) -> None:
        self.confirmed_lsn = max(self.confirmed_lsn, self._target(reader, idle=idle))
        cur.send_feedback(write_lsn=self.confirmed_lsn, flush_lsn=self.confirmed_lsn, force=True)
        if self.on_feedback is not None:
            self.on_feedback(self.confirmed_lsn)


class TransactionReader:
    """pgoutput messages into whole transactions of one table, column names attached."""

    def __init__(self, table: str) -> None:
        schema, _, name = table.rpartition(".")
        self._schema = schema.strip('"') or None
        self._name = name.strip('"')
        self._columns: dict[int, tuple[str, ...]] = {}  # relations of the table only
        self._begin: Begin | None = None
        self._changes: list[RowChange] = []

    @property
    def open(self) -> bool:
        """True between a Begin and its Commit."""
        return self._begin is not None

    def take(self, message: object) -> Transaction | None:
        """Take one message; the transaction it completes, if it is a Commit."""
        if isinstance(message, Relation):
            if message.name == self._name and self._schema in (None, message.namespace):
                self._columns[message.oid] = message.columns
            else:
                self._columns.pop(message.oid, None)
        elif isinstance(message, Begin):
            self._begin, self._changes = message, []
        elif isinstance(message, Commit):
            changes, self._begin, self._changes = tuple(self._changes), None, []
            return Transaction(message.commit_lsn, message.end_lsn, message.commit_time, changes)
        elif isinstance(message, Insert) and message.relation in self._columns:
            self._changes.append(RowChange(INSERT, new=self._row(message.relation, message.new)))
        elif isinstance(message, Update) and message.relation in self._columns:
            old = self._row(message.relation, message.old) if message.old is not None else None
            new = self._row(message.relation, message.new, old)
            self._changes.append(RowChange(UPDATE, old=old, new=new))
        elif isinstance(message, Delete) and message.relation in self._columns:
            self._changes.append(RowChange(DELETE, old=self._row(message.relation, message.old)))
        elif isinstance(message, Truncate) and any(r in self._columns for r in message.relations):
            self._changes.append(RowChange(TRUNCATE))
        return None

    def _row(
        self,
        relation: int,
        values: tuple[Value, ...],
        old: Mapping[str, str | None] | None = None,
    ) -> dict[str, str | None]:
        # An identity-key tuple sends NULL for the columns outside the key; only the key's
        # columns are known then, but which ones is not said: the caller reads the status.
        # A TOASTed value an UPDATE left alone arrives as UNCHANGED: the old row has it.
        row: dict[str, str | None] = {}
        for column, value in zip(self._columns[relation], values, strict=False):
            if value is UNCHANGED:
                if old is not None and column in old:
                    row[column] = old[column]
                continue
            row[column] = value if isinstance(value, str) or value is None else None
        return row


def _close(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
