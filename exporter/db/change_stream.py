"""The queue table's change stream: a pgoutput slot read over the streaming replication protocol.

asyncpg does not speak the replication protocol, so psycopg2's LogicalReplicationConnection
(the optional extra ``logical``) reads the slot in a thread of its own. A walsender decodes each
WAL record once and keeps its reorder buffer between messages; the SQL functions
(``pg_logical_slot_get_binary_changes``) would decode again from the slot's restart_lsn on
every call, which behind a long transaction grows without bound (docs/logical.md). The thread
folds each committed transaction of the table as it arrives (db/change_folder.py) and reads as
fast as the server sends; the event loop takes the folded batches (:meth:`ChangeStream.take`)
and says how far the slot may be confirmed (:meth:`ChangeStream.confirm`): the end of the last
commit whose counts a /metrics response carried.

Each start is a run (:class:`StreamRun`) with its own stop flag and outlet, and a run's thread
is never forgotten while it lives: a run that did not stop in time keeps the next from starting,
so two threads never read one slot. A run that ends on an error keeps it (:class:`StreamFailure`,
its reason from the SQLSTATE) until the event loop takes it with what the run folded before.
A slot found invalidated, or gone after this process read from it, is a gap (:class:`Gap`): the
thread replaces it with a new one and says so in the outlet, where the counting mode takes a new
baseline (docs/logical.md, "Gaps").
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import select
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.db.change_folder import Gap, Outlet, TransactionFolder
from exporter.db.pgoutput import PgoutputError
from exporter.db.pool import APPLICATION_NAME, DatabaseError
from exporter.db.stream_failure import (
    NOT_IN_PREREQUISITE_STATE,
    StreamFailure,
    failure_of,
    first_line,
    psycopg2_modules,
)
from exporter.model.row_changes import Batch, ChangeFold
from exporter.vocabulary import (
    INTERNAL,
    STREAM,
    STREAM_CONNECT,
    STREAM_DECODE,
    STREAM_LOST,
)

__all__ = ["ChangeStream", "Gap", "StreamFailure", "StreamOptions", "StreamRun"]

log = logging.getLogger(__name__)

# How often the confirmed position is sent even when it did not move: the server's
# wal_sender_timeout (60 s by default) ends a replication connection that stays silent.
FEEDBACK_EVERY = 5.0
WAIT = 0.5  # seconds the thread sleeps on a quiet socket before it looks at its stop flag
STOP_WAIT = 5.0  # how long a stop waits for the thread (it may be blocked creating its slot)
CHECK_EVERY = 64  # messages read between two looks at the clock while the stream is busy
BURST = range(CHECK_EVERY)
# Once the quiet socket has data, the thread waits this long more before it reads: the
# walsender sends each commit as it happens, and waking for every one cost a select, a recv
# and a look at the clock per transaction. A wake-up from the event loop (a scrape waiting for
# its position to be confirmed) cuts the pause short; what arrives meanwhile waits in the
# socket's buffer (about 30 kB at 2,000 jobs/s).
GATHER = 0.01
# The walsender formats values with the session's settings: ISO times in UTC, exact floats,
# and text in UTF-8 (the decoder refuses anything else rather than guess).
SESSION_OPTIONS = "-c DateStyle=ISO -c TimeZone=UTC -c extra_float_digits=3 -c client_encoding=UTF8"
LOST = "lost"  # pg_replication_slots.wal_status of an invalidated slot
# A peer that vanished (a partition, a host gone) leaves a half-open connection: TCP keepalives
# find it while idle, and unacknowledged feedback (sent every FEEDBACK_EVERY) within
# tcp_user_timeout, after which the stream fails with reason "lost" and is started again.
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 15,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # milliseconds
}


@dataclass(frozen=True)
class StreamOptions:
    """Where the stream reads: the DSN, the slot, the publication and the table's name."""

    dsn: str
    slot: str
    publication: str
    table: str  # schema-qualified or bare, as database.table says
    connect_timeout: float = 5.0


class StreamRun:
    """One start of the stream: its thread, its stop flag, its outlet, and how it ended."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.outlet = Outlet()
        self.failure: StreamFailure | None = None
        self.thread: threading.Thread | None = None

    @property
    def alive(self) -> bool:
        """True while its thread runs."""
        return self.thread is not None and self.thread.is_alive()


@dataclass(frozen=True)
class Ended:
    """A run whose thread has ended: why, and what it folded that was not taken yet."""

    failure: StreamFailure
    items: list[Batch | Gap]


class ChangeStream:
    """One replication connection at a time, in one thread, folding committed transactions."""

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._run: StreamRun | None = None
        self.runs = 0  # runs started: tells one run from the next
        # A stopped run whose thread did not end in time: no run starts while it lives.
        self._lingering: StreamRun | None = None
        # Written by the event loop, read by the thread (an int assignment is atomic).
        self._confirm = 0
        self.server_lsn = 0  # the server's WAL position as last reported to the stream
        self.confirmed_lsn = 0  # the position last sent as flushed (after the send)
        self.created_slot = False  # True when this stream created its slot
        self._delivered_end = 0  # end of the last transaction folded into an outlet
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
        """True while the current run's thread reads (or connects)."""
        return self._run is not None and self._run.alive

    @property
    def lingering(self) -> bool:
        """True while a stopped run's thread has not ended yet."""
        return self._lingering is not None and self._lingering.alive

    def start(self, fold: ChangeFold, skip_below: int) -> None:
        """Start a run in a new thread, folding with ``fold`` and skipping commits that end at
        or before ``skip_below`` (counted already); DatabaseError while a stopped run's thread
        lives, or without psycopg2."""
        psycopg2_modules()
        if self.lingering:
            raise DatabaseError(STREAM, "the previous stream thread has not ended yet")
        self._lingering = None
        run = self._run = StreamRun()
        self.runs += 1
        # The thread's log lines carry the queue's fields, as the event loop's do.
        context = contextvars.copy_context()
        run.thread = threading.Thread(
            target=context.run,
            args=(self._read_slot, run, fold, skip_below),
            name=f"logical {self.options.slot}",
            daemon=True,
        )
        run.thread.start()

    def stop(self, timeout: float = STOP_WAIT) -> bool:
        """Stop the current run and close its connection; True once its thread has ended. What
        it folded and nobody took is dropped (not confirmed: the next reader gets it again)."""
        run, self._run = self._run, None
        if run is None:
            return True
        run.stop.set()
        self._wake()
        if run.thread is not None:
            run.thread.join(timeout)
        if run.alive:
            self._lingering = run
            return False
        return True

    def take(self) -> list[Batch | Gap]:
        """What the current run folded since the last take, in commit order."""
        return self._run.outlet.take() if self._run is not None else []

    def ended(self) -> Ended | None:
        """The current run, if its thread has ended: its failure and what it folded last, once."""
        run = self._run
        if run is None or run.alive:
            return None
        self._run = None
        failure = run.failure or StreamFailure(INTERNAL, "the stream thread ended")
        return Ended(failure, run.outlet.take())

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

    def _read_slot(self, run: StreamRun, fold: ChangeFold, skip_below: int) -> None:
        psycopg2, extras = psycopg2_modules()
        try:
            conn = psycopg2.connect(
                self.options.dsn,
                connection_factory=extras.LogicalReplicationConnection,
                connect_timeout=max(1, round(self.options.connect_timeout)),
                options=SESSION_OPTIONS,
                # pg_stat_replication names the holder by it (logical-drop, "slot in use").
                application_name=f"{APPLICATION_NAME} stream {self.options.slot}",
                **KEEPALIVES,
            )
        except psycopg2.Error as exc:
            run.failure = failure_of(exc, STREAM_CONNECT)
            return
        streaming = False
        try:
            cur = conn.cursor()
            gaps = self.gaps
            self._ensure_slot(psycopg2, cur, run)
            try:
                self._start_replication(cur)
            except psycopg2.Error as exc:
                # Invalidated between the check and the start: the same gap as a slot found
                # lost. The catalog says which, whatever language the server speaks.
                if getattr(exc, "pgcode", None) != NOT_IN_PREREQUISITE_STATE:
                    raise
                if self._wal_status(cur) != LOST:
                    raise
                self._replace(cur, run, f"START_REPLICATION refused: {first_line(exc)}", True)
                self._create(psycopg2, cur)
                self._start_replication(cur)
            streaming = True
            # After a gap the new slot's positions start anew: nothing of the old one is skipped.
            skip = skip_below if self.gaps == gaps else 0
            self._read(cur, run, TransactionFolder(self.options.table, fold, run.outlet, skip))
        except psycopg2.Error as exc:
            run.failure = failure_of(exc, STREAM_LOST if streaming else STREAM_CONNECT)
        except PgoutputError as exc:
            run.failure = StreamFailure(STREAM_DECODE, str(exc))
        except Exception as exc:
            log.exception("logical stream failed", extra={"fields": {"slot": self.options.slot}})
            run.failure = StreamFailure(INTERNAL, f"{type(exc).__name__}: {exc}")
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    def _start_replication(self, cur: Any) -> None:
        cur.start_replication(
            slot_name=self.options.slot,
            decode=False,
            options={"proto_version": "1", "publication_names": self.options.publication},
        )

    def _wal_status(self, cur: Any) -> str | None:
        cur.execute(
            "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (self.options.slot,)
        )
        row = cur.fetchone()
        return None if row is None else str(row[0])

    def _ensure_slot(self, psycopg2: Any, cur: Any, run: StreamRun) -> None:
        # Created when missing, never dropped here unless the server invalidated it: a slot
        # keeps the position of what was counted and scraped, which a restarted or standby
        # exporter resumes from. A missing slot is a gap only when this process saw it before:
        # at the first start nothing tells a slot never made from one lost with a failover.
        status = self._wal_status(cur)
        if status is not None and status != LOST:
            self._known = True
            return
        if status is not None:
            found = "wal_status lost (invalidated: the server removed WAL it needs)"
            self._replace(cur, run, found, True)
        elif self._known:
            self._replace(cur, run, "the slot is gone (dropped, or lost with a failover)", False)
        self._create(psycopg2, cur)

    def _create(self, psycopg2: Any, cur: Any) -> None:
        # Creation waits until every transaction open now has ended, a prepared one included
        # (counting starts after them: they are history, as before polling's baseline).
        slot = self.options.slot
        log.info(
            "creating the replication slot; it waits for the transactions open now to end",
            extra={"fields": {"slot": slot}},
        )
        try:
            cur.create_replication_slot(slot, output_plugin="pgoutput")
        except psycopg2.errors.DuplicateObject:
            self._known = True
            return  # another exporter created it meanwhile
        self.created_slot = self._known = True
        log.info("replication slot created", extra={"fields": {"slot": slot}})

    def _replace(self, cur: Any, run: StreamRun, found: str, drop: bool) -> None:
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
        run.outlet.gap(Gap(slot, found))

    def _read(self, cur: Any, run: StreamRun, folder: TransactionFolder) -> None:
        stop, read_message, take = run.stop, cur.read_message, folder.take
        sent_at = 0.0
        while not stop.is_set():
            # A burst of up to CHECK_EVERY messages, with nothing else per message: the
            # stop flag, the clock and the feedback are looked at between bursts.
            idle = True
            for _ in BURST:
                message = read_message()
                if message is None:
                    break
                take(message.payload)
            else:
                idle = False
            self._delivered_end = max(self._delivered_end, folder.delivered)
            if idle:
                self.server_lsn = max(self.server_lsn, int(cur.wal_end))
            now = time.monotonic()
            # Also while messages keep coming: a busy stream must still tell the server it
            # lives, and how far it may let go.
            if self._target(folder, idle=idle) > self.confirmed_lsn or (
                now - sent_at >= FEEDBACK_EVERY
            ):
                self._feedback(cur, folder, idle=idle)
                sent_at = now
            if idle:
                self._sleep(cur)
        # Stopping (a standby now, or shutting down): what the event loop allowed last is
        # confirmed, so a successor does not count again what a scrape already carried.
        self._feedback(cur, folder, idle=False)

    def _sleep(self, cur: Any) -> None:
        """Wait for the server, a wake-up from the event loop, or WAIT."""
        ready, _, _ = select.select([cur, self._wake_read], [], [], WAIT)
        if ready and self._wake_read not in ready:
            select.select([self._wake_read], [], [], GATHER)
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_read, 64):
                pass

    def _target(self, folder: TransactionFolder, *, idle: bool) -> int:
        target = self._confirm
        if idle and target >= self._delivered_end and not folder.open:
            # Everything handed over is counted and carried: the WAL since holds nothing of
            # the table's, so a quiet table never pins the WAL of busy ones.
            target = max(target, self.server_lsn)
        return target

    def _feedback(self, cur: Any, folder: TransactionFolder, *, idle: bool) -> None:
        target = max(self.confirmed_lsn, self._target(folder, idle=idle))
        cur.send_feedback(write_lsn=target, flush_lsn=target, force=True)
        # Recorded once sent: a scrape told "confirmed" must be able to rely on it.
        self.confirmed_lsn = target
        if self.on_feedback is not None:
            self.on_feedback(target)


def _close(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
