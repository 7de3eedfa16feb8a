"""The default profile's transition rules for the change stream, and tallies into the counters.

The logical counting mode (docs/logical.md) reads each committed INSERT, UPDATE and DELETE of
the job table from a replication slot, with the old row (REPLICA IDENTITY FULL, or an identity
index that carries the status and attempts) and the new one. Every transition is then seen, in
commit order, however many happen between two collections: the counts come from the two rows of
each change, never from a guess. :class:`StreamFold` counts them in the stream's thread, by the
job type as the table holds it; :func:`credit` adds a tally to the queue's counters on the event
loop, where job types become labels. Values are PostgreSQL's text output, keyed by the table's
column names; the table mapping says which column plays which role and what each status value
is. No I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone, tzinfo

from exporter.counting.results import classify, decode_result, split_error
from exporter.counting.status_rule import (
    CANCELLED,
    COUNTED,
    IGNORED,
    UNMAPPED,
    StatusChange,
    status_change,
)
from exporter.counting.statuses import count_unmapped, show_status
from exporter.counting.tracker import TrackerOptions
from exporter.model import DEAD, DONE, PENDING, RUNNING, JobType, Tallies
from exporter.model.change_tally import MAX_KEYS, OVERFLOW, ChangeTally
from exporter.model.row_changes import DELETE, INSERT, TRUNCATE, UPDATE, RowChange, TextRow
from exporter.settings.table import TableMapping
from exporter.vocabulary import LEASE_EXPIRED, OTHER, Status

# The label of the status an active job had when its row was deleted.
ACTIVE_NAMES: dict[int, str] = {PENDING: "pending", RUNNING: "running"}
# The roles whose columns the rules read; every other column is stepped over undecoded.
READ_ROLES = (
    "status", "job_type", "attempts", "last_error", "result", "updated_at", "run_started_at",
    "run_after", "created_at",
)  # fmt: skip

Buckets = tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]


class StreamFold:
    """Counts committed changes of the job table into a tally; one change at a time, pure."""

    def __init__(self, mapping: TableMapping, options: TrackerOptions, buckets: Buckets) -> None:
        self.options = options
        self._buckets = buckets
        column = mapping.column
        self.status = column("status")
        self._job_type = column("job_type")
        self._attempts = column("attempts")
        self._last_error = column("last_error")
        # A table without result (every path null): no cost, the run time from the row.
        self._result = column("result") if mapping.has("result") else None
        self._updated_at = column("updated_at")
        self._started = column("run_started_at")
        self._run_after = column("run_after")
        self._created = column("created_at")
        self.columns = frozenset(column(role) for role in READ_ROLES if mapping.has(role))
        # An UPDATE's old row tells its status, a release (attempts lowered) and whether the
        # completing statement stamped updated_at.
        self.old_columns = frozenset((self.status, self._attempts, self._updated_at))
        # Status codes as the polling SQL's CASE gives them (status_rule.py): the four, the
        # values a mapping names as cancelled or ignored, and any other value (NULL included)
        # unmapped.
        codes = {str(mapping.value(status)): int(status) for status in Status}
        codes.update((str(value), CANCELLED) for value in mapping.cancelled)
        codes.update((str(value), IGNORED) for value in mapping.ignored)
        self._codes = codes
        self._numeric = all(isinstance(v, int) for v in mapping.status_values.values())
        # Timestamps without a time zone are read in the writers' declared zone.
        self._zone = _zone(mapping.time_zone)
        # The rule's verdicts and the job types' keys, remembered: the stream's thread asks
        # for the same few thousand times a second.
        self._rules: dict[tuple[int | None, int], StatusChange] = {}
        self._keys: dict[str, JobType] = {}

    def tally(self) -> ChangeTally:
        """A new tally with the queue's buckets."""
        return ChangeTally(*self._buckets)

    def quiet(self, old: str | None, new: str | None) -> bool:
        """A claim (pending to running), a heartbeat (status unchanged) or a change of a DONE row
        counts nothing, between two of the four statuses (any other value is counted)."""
        codes = self._codes
        after = codes.get(new, UNMAPPED) if new is not None else UNMAPPED
        before = codes.get(old, UNMAPPED) if old is not None else UNMAPPED
        if after not in COUNTED or before not in COUNTED:
            return False
        return before in (after, DONE) or (before == PENDING and after == RUNNING)

    def count(self, change: RowChange, commit_time: float, tally: ChangeTally) -> None:
        """Count one committed change, by the rule of exporter/counting/status_rule.py."""
        tally.changes += 1
        kind = change.kind
        new, old = change.new, change.old
        if kind == INSERT and new is not None:
            # A row inserted finished (an archive restore) is counted as if it had been
            # inserted pending and then changed, as polling counts a row it meets first.
            self._change(None, new, {}, commit_time, tally)
        elif kind == UPDATE and new is not None:
            status = self.status
            if old is None or status not in old:
                # An identity index sends no old key when none of its columns changed.
                old = {**(old or {}), status: new.get(status)}
            self._change(self._code(old[status]), new, old, commit_time, tally)
        elif kind == DELETE and old is not None:
            before = self._code(old.get(self.status))
            if before in ACTIVE_NAMES:
                # Gone before it finished (retention, a manual cleanup): not a completion.
                tally.vanished[ACTIVE_NAMES[before]] += 1
            elif before == DEAD and self._job_type in old:
                tally.dead_delta[self._key(old)] -= 1
            elif before == DEAD:
                tally.dead_unknown += 1
            # A finished (DONE) row was counted when it finished.
        elif kind == TRUNCATE:
            tally.truncates += 1

    def _change(
        self, before: int | None, new: TextRow, old: TextRow, at: float, tally: ChangeTally
    ) -> None:
        """A move from status code ``before`` (None: an insert) to the new row's."""
        if self.status not in new:
            return  # a column list without the status: nothing to tell (refused at start)
        text = new[self.status]
        after = self._code(text)
        change = self._rules.get((before, after))
        if change is None:
            change = self._rules[(before, after)] = status_change(before, after)
        if change.unmapped:
            shown = show_status(text, numeric=self._numeric)
            tally.unmapped[shown] += 1
            tally.unmapped_text.setdefault(shown, text)
        if before == DEAD and after != DEAD:
            tally.dead_delta[self._key(new)] -= 1  # it left the dead letter, for any value
        if not (change.enqueued or change.cancelled or change.transition):
            return
        key = tally.key(self._key(new))
        if change.enqueued:
            tally.enqueued[key] += 1
        if change.cancelled:
            tally.cancelled[key] += 1
        if change.transition:
            # Back into the flow from outside it: as from a waiting job.
            self._transition(before if before in COUNTED else PENDING, after, old, new, at, tally)

    def _time(self, text: str | None) -> datetime | None:
        """A timestamp's text output as an aware datetime (a naive one in the writers' zone)."""
        moment = parse_time(text) if text is not None else None
        if moment is not None and moment.tzinfo is None:
            moment = moment.replace(tzinfo=self._zone)
        return moment

    def _code(self, text: str | None) -> int:
        return UNMAPPED if text is None else self._codes.get(text, UNMAPPED)

    def _transition(
        self, before: int, after: int, old: TextRow, new: TextRow, at: float, tally: ChangeTally
    ) -> None:
        if before == DONE:
            return  # DONE is terminal in the queue; a changed DONE row is not ours to count
        job_type = self._key(new)
        key = tally.key(job_type)
        if before == DEAD and after != DEAD:
            if after == PENDING:
                tally.requeued[key] += 1
            return
        if after == DONE and before in (PENDING, RUNNING):
            self._completion(old, new, key, at, tally)
        elif after == PENDING and before == RUNNING:
            if self._released(old, new):
                return  # handed back (attempts - 1): no attempt failed, nothing to count
            tally.failures[(key, self._reason(new))] += 1
        elif after == DEAD and before != DEAD:
            reason = self._reason(new)
            if before == RUNNING:
                tally.failures[(key, reason)] += 1  # the attempt that killed it
            tally.dead[(key, reason)] += 1
            tally.dead_delta[job_type] += 1

    def _released(self, old: TextRow, new: TextRow) -> bool:
        # A worker that hands its job back lowers attempts, which no failure does. Without
        # the old attempts (an identity index that does not carry them) it reads as a failure.
        before, after = _int(old.get(self._attempts)), _int(new.get(self._attempts))
        return before is not None and after is not None and after < before

    def _reason(self, new: TextRow) -> str:
        # The newest failure: a reclaim when the reaper's marker ends last_error, else the
        # worker's message (NOTES.md: the text before the marker belongs to an earlier one).
        error = split_error(new.get(self._last_error), self.options.lease_marker)
        if error.reclaims:
            return LEASE_EXPIRED
        return classify(error.base, self.options.deadline_prefix)

    def _completion(
        self, old: TextRow, new: TextRow, key: JobType, commit_time: float, tally: ChangeTally
    ) -> None:
        tally.completed[key] += 1
        result = new.get(self._result) if self._result is not None else None
        outcome = decode_result(result, self.options.paths)
        for field_name in outcome.malformed:
            tally.malformed[field_name] += 1
        for component, usd in outcome.cost.items():
            pair = (key, component)
            tally.cost[pair] = tally.cost.get(pair, 0.0) + usd
        # The completion's moment: updated_at when the completing statement set it, else the
        # commit (an application that completes without touching updated_at). Differences of
        # datetimes, exact to the microsecond as polling's SQL computes them (a difference of
        # two Unix times as floats is not).
        stamp = new.get(self._updated_at)
        updated = self._time(stamp) if stamp != old.get(self._updated_at) else None
        end = datetime.fromtimestamp(commit_time, UTC) if updated is None else updated
        started = self._time(new.get(self._started))
        run_after = self._time(new.get(self._run_after))
        created = self._time(new.get(self._created))
        duration = outcome.duration_seconds
        if duration is None and started is not None:
            duration = max(0.0, (end - started).total_seconds())
        wait = None
        if run_after is not None:
            wait = max(0.0, ((started or run_after) - run_after).total_seconds())
        latency = max(0.0, (end - created).total_seconds()) if created is not None else None
        tally.observe(key, duration, wait, latency)

    def _key(self, row: TextRow) -> JobType:
        text = row.get(self._job_type)
        if text is None:
            return ""
        key = self._keys.get(text)
        if key is None:
            if len(self._keys) >= MAX_KEYS:
                self._keys.clear()  # whoever enqueues names job types: bounded
            key = int(text) if text.isascii() and text.lstrip("-").isdigit() else text
            self._keys[text] = key
        return key


def credit(
    tally: ChangeTally,
    tallies: Tallies,
    label: Callable[[JobType], str],
    unmapped_new: list[tuple[str, str | None]],
) -> None:
    """Add a tally to the queue's counters, job types turned into labels; an unmapped status
    value named for the first time goes to ``unmapped_new`` (shown, the row's text)."""

    def one(key: JobType) -> str:
        return OTHER if key == OVERFLOW else label(key)

    for mine, theirs in (
        (tallies.enqueued, tally.enqueued),
        (tallies.completed, tally.completed),
        (tallies.requeued, tally.requeued),
        (tallies.cancelled, tally.cancelled),
    ):
        for key, n in theirs.items():
            mine[one(key)] += n
    for pairs, counted in ((tallies.failures, tally.failures), (tallies.dead, tally.dead)):
        for (key, reason), n in counted.items():
            pairs[(one(key), reason)] += n
    for (key, component), usd in tally.cost.items():
        tallies.add_cost(one(key), component, usd)
    tallies.malformed.update(tally.malformed)
    for table, observed in (
        (tallies.duration, tally.duration),
        (tallies.wait, tally.wait),
        (tallies.latency, tally.latency),
    ):
        for key, histogram in observed.items():
            name = one(key)
            found = table.get(name)
            table[name] = histogram if found is None else found.merged(histogram)
    tallies.vanished.update(tally.vanished)
    for shown, rows in tally.unmapped.items():
        named = count_unmapped(tallies.unmapped_status, shown, rows)
        if named is not None:
            unmapped_new.append((named, tally.unmapped_text.get(shown)))


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _zone(declared: str | None) -> tzinfo:
    """The writers' zone of naive timestamps: UTC, or a fixed offset ``+HH:MM``."""
    if declared is None or declared.upper() == "UTC":
        return UTC
    sign = -1 if declared.startswith("-") else 1
    hours, _, minutes = declared.lstrip("+-").partition(":")
    return timezone(sign * timedelta(hours=int(hours), minutes=int(minutes or 0)))


def parse_time(text: str) -> datetime | None:
    """A timestamptz's text output (DateStyle ISO); None for infinity."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def dead_moved(into: Counter[JobType], tally: ChangeTally) -> None:
    """Add a tally's change in DEAD rows per job type to the mode's (its dead gauge's)."""
    into.update(tally.dead_delta)
