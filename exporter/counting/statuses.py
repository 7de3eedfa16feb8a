"""Status values the table mapping does not name, found where the exporter looks anyway.

A row whose status is none of the values ``table.status_values`` names (the four, and the values
counted as cancelled or ignored) is in no count: not in the jobs by status, not completed, not
failed, not dead (exporter/counting/status_rule.py). A typo there (``dead: dead`` where the table
writes ``failed``) would otherwise export zeros that look right. Two places show such values:
the planner's statistics of the status column (read at the first collection and at each
dead-letter recount; absent until the table is first analyzed), and the changed rows each cycle
reads. Changed rows are counted; each distinct value is named once, at most :data:`MAX_NAMED`
of them, so memory stays bounded whatever the table holds. No I/O: the notices go to the
poller, which logs them.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from exporter.model import Notice
from exporter.settings.table import REFERENCE_STATUS_VALUES, TableMapping
from exporter.vocabulary import Status

MAX_NAMED = 16  # distinct values named (logged, on the status page); later ones share one count
VALUE_CHARS = 64  # a value is shown cut to this many characters
SQL_CHARS = VALUE_CHARS + 1  # what SQL sends of a value: one more, so a cut is known
CUT = "\u2026"
OTHER_VALUES = "(other values)"  # no shown value looks like this: they are quoted, or digits
MAPPED_CODES = frozenset(int(status) for status in Status)

# Words queue tables use for each status: a value among them hints at the field to fix.
_SYNONYMS: dict[Status, frozenset[str]] = {
    Status.PENDING: frozenset(
        {"pending", "queued", "waiting", "new", "ready", "available", "enqueued", "todo"}
    ),
    Status.RUNNING: frozenset(
        {"running", "active", "started", "processing", "in_progress", "working", "claimed"}
    ),
    Status.DONE: frozenset(
        {"done", "finished", "completed", "complete", "succeeded", "success", "successful"}
    ),
    Status.DEAD: frozenset(
        {"dead", "failed", "failure", "errored", "discarded", "killed", "dead_letter", "buried"}
    ),
}
# Words for a cancelled job: such a value hints at status_values.cancelled.
_CANCELLED_WORDS = frozenset({"cancelled", "canceled", "aborted", "revoked"})

ROW_MESSAGE = (
    "a changed row's status is none of the mapped status values: the row is in no count "
    "but the unmapped status rows; check the setting named (a status of the table's own is "
    "named under it as cancelled, or as ignore)"
)
STATS_MESSAGE = (
    "the status column holds a value none of the mapped status values matches (planner "
    "statistics of the last ANALYZE): its rows are in no count; check the setting named (a "
    "status of the table's own is named under it as cancelled, or as ignore)"
)
OVERFLOW_MESSAGE = (
    f"more than {MAX_NAMED} distinct unmapped status values: further ones are counted "
    "together, not named"
)


@dataclass(frozen=True)
class StatusValues:
    """The four values a queue's status column holds, the values of its own the mapping counts
    as cancelled or ignores, and where the configuration sets them."""

    values: Mapping[str, int | str] = field(default_factory=lambda: dict(REFERENCE_STATUS_VALUES))
    setting: str = "table.status_values"  # the field path to fix
    location: str = ""  # file:line of the setting, when a file wrote it
    table: str = "job"
    column: str = "status"
    known: tuple[int | str, ...] = ()  # status_values.cancelled and .ignore

    @classmethod
    def of(cls, mapping: TableMapping) -> StatusValues:
        """The mapping's status values, with the path and line of the setting."""
        setting, line = mapping.where("status_values")
        return cls(
            dict(mapping.status_values),
            setting,
            line.strip().removeprefix("(").removesuffix(")"),
            mapping.name,
            mapping.column("status"),
            (*mapping.cancelled, *mapping.ignored),
        )

    @property
    def numeric(self) -> bool:
        """True when the column holds integers (shown as they are, not quoted)."""
        return all(isinstance(v, int) for v in self.values.values())

    def texts(self) -> set[str]:
        """Every named value (the four, cancelled, ignored) as the column's text spells them."""
        return {str(v) for v in (*self.values.values(), *self.known)}


def show_status(text: str | None, *, numeric: bool) -> str:
    """A status value as logs and the status page name it: quoted and escaped like a Python
    string literal, cut to VALUE_CHARS characters; integers bare, NULL for no value."""
    if text is None:
        return "NULL"
    cut = text[:VALUE_CHARS]
    if numeric and cut.lstrip("-").isdigit() and cut.isascii():
        return cut
    return repr(cut) + (CUT if len(text) > VALUE_CHARS else "")


def closest_status(text: str | None, statuses: StatusValues, seen: Iterable[str] = ()) -> str:
    """``status_values.dead: failed`` when the field to fix is obvious, else an empty string.

    Obvious: the value is a near miss of one mapped value (a typo on either side), or a usual
    word for one status whose mapped value is not ``seen`` in the table's statistics.
    """
    if text is None or statuses.numeric:
        return ""
    by_value = {str(v): label for label, v in statuses.values.items()}
    close = difflib.get_close_matches(text, list(by_value), n=1, cutoff=0.75)
    if close:
        return f"status_values.{by_value[close[0]]}: {text}"
    present = set(seen)
    word = text.strip().lower()
    for status, words in _SYNONYMS.items():
        if word in words and str(statuses.values[status.label]) not in present:
            return f"status_values.{status.label}: {text}"
    if word in _CANCELLED_WORDS:
        return f"status_values.cancelled: {text}"
    return ""


def count_unmapped(counter: Counter[str], shown: str, rows: int = 1) -> str | None:
    """Count ``rows`` rows of the shown value; the key just named for the first time, else None.

    Past MAX_NAMED named values, new ones are counted under OTHER_VALUES.
    """
    named = len(counter) - (1 if OTHER_VALUES in counter else 0)
    key = shown if shown in counter or named < MAX_NAMED else OTHER_VALUES
    new = key not in counter
    counter[key] += rows
    return key if new else None


def _fields(statuses: StatusValues, shown: str, hint: str) -> dict[str, object]:
    fields: dict[str, object] = {"value": shown, "setting": statuses.setting}
    if statuses.location:
        fields["location"] = statuses.location
    if hint:
        fields["suggestion"] = hint
    return fields


def row_notice(
    statuses: StatusValues, key: str, text: str | None, seen: Iterable[str] = ()
) -> Notice:
    """The one log line of a value first read in a changed row (``key``: how it is shown)."""
    if key == OTHER_VALUES:
        return Notice(OVERFLOW_MESSAGE, {"setting": statuses.setting})
    return Notice(ROW_MESSAGE, _fields(statuses, key, closest_status(text, statuses, seen)))


def unmapped_notices(
    statuses: StatusValues | None, unmapped: list[tuple[str, str | None]], seen: Iterable[str]
) -> list[Notice]:
    """The notices of the values first read in changed rows since the last call (``unmapped``,
    which is emptied: each is said once)."""
    notices = [] if statuses is None else [row_notice(statuses, k, t, seen) for k, t in unmapped]
    unmapped.clear()
    return notices


def stats_notices(statuses: StatusValues, values: Iterable[str], named: set[str]) -> list[Notice]:
    """One notice per value of the statistics that no status maps and ``named`` lacks (it is
    added, up to MAX_NAMED values)."""
    values = list(values)
    mapped = statuses.texts()
    notices: list[Notice] = []
    for text in values:
        if text in mapped:
            continue
        shown = show_status(text, numeric=statuses.numeric)
        if shown in named or len(named) >= MAX_NAMED:
            continue
        named.add(shown)
        hint = closest_status(text, statuses, values)
        fields = {"table": statuses.table, "column": statuses.column}
        notices.append(Notice(STATS_MESSAGE, {**_fields(statuses, shown, hint), **fields}))
    return notices
