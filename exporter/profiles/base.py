"""What a profile is (data plus a counting mode), and what every preset reader shares.

No I/O: a reader hands out :class:`Query` values, the caller runs them (see docs/presets.md,
"Interface") and passes the rows back. Times are Unix seconds from the database's clock.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Generic, Literal, Protocol, TypeVar

from exporter.counting.gauges import Gauges, Reading, first, gauges_from
from exporter.counting.reader import LedgerReader
from exporter.counting.sqltext import horizon_sessions, sql_blocks
from exporter.counting.stream_counter import Buckets
from exporter.model import (
    CountingError,
    CountingMode,
    Coverage,
    JobType,
    JobTypeLabels,
    LogicalTarget,
    Query,
    Results,
    Row,
    TableShape,
    Tallies,
)
from exporter.model.row_changes import ChangeFold
from exporter.settings import QueueSettings
from exporter.settings.table import TableMapping

__all__ = ["CountingError", "Gauges", "Query", "Reading", "Results", "Row", "first", "gauges_from"]

# "exact at recounts": counted exactly every few cycles; in between kept from the events the
# reader sees, which a recount corrects (the dead gauge, as the default profile keeps it).
Exactness = Literal["exact", "exact at recounts", "approximate", "not exported"]
# Every preset reads its active jobs' gauges straight from the live table, so all are exact.
EXACT_GAUGES: dict[str, Exactness] = dict.fromkeys(
    (
        "pending",
        "running",
        "scheduled",
        "oldest_pending_age",
        "oldest_ready_wait",
        "running_oldest",
        "stuck",
    ),
    "exact",
)

PACKAGE = "exporter.profiles"  # its sql/ holds the presets' statements and index files

# One failure reason for libraries that store none (procrastinate) or only the last one.
UNKNOWN_REASON = "unknown"


@dataclass(frozen=True)
class RetentionHint:
    """What the library deletes and when, so the exporter can warn about lost history."""

    rows_deleted_on_success: bool
    history_kept: str
    warning: str
    # The library's default retention of finished rows, when short enough to matter: the
    # exporter warns at start-up when its interval is above half of it.
    seconds: float | None = None


def preset_queries(preset: str, *, event_log: str | None = None) -> dict[str, str]:
    """The statements of profiles/sql/<preset>.sql plus the shared ones (sql/shared.sql):
    the snapshot, and with ``event_log`` (the log table) the event-log horizon; every horizon
    reads the sessions through the one fragment of exporter/sql/horizon.sql."""
    shared = sql_blocks(PACKAGE, "sql/shared.sql")
    blocks = {"snapshot": shared["snapshot"], **sql_blocks(PACKAGE, f"sql/{preset}.sql")}
    if event_log is not None:
        blocks["horizon"] = shared["eventlog_horizon"].replace("{log}", event_log)
    sessions = horizon_sessions()
    return {name: sql.replace("{sessions}", sessions) for name, sql in blocks.items()}


# The profile's own counting mode: its hooks (check_table, retune) take the mode it made, so
# they never downcast a CountingMode to find out which one they were given.
M = TypeVar("M", bound=CountingMode)


@dataclass(frozen=True)
class Profile(Generic[M]):
    """A queue schema as data plus a counting mode: what the one collection loop runs."""

    name: str
    coverage: Coverage  # the series it can fill
    required_indexes: tuple[str, ...]
    # The table that must exist; its OID keys the queue's election lock.
    watched_table: Callable[[QueueSettings], str]
    make_labels: Callable[[QueueSettings], JobTypeLabels]
    # A fresh counting mode (a new baseline) that counts into the queue's labels and tallies.
    make_mode: Callable[[QueueSettings, JobTypeLabels, Tallies], M]
    note: Mapping[str, str] = field(default_factory=dict)  # logged once at start
    # How long the library keeps a finished row by default, when short enough to matter: a
    # row pruned between two cycles is never read, so start-up warns above half of it.
    retention: float | None = None
    # The default profile's table mapping: the index names it needs, and a check of the table
    # against the catalog run before a fresh mode's first cycle (and with every index check),
    # which renders the mode's SQL for the table's real types.
    index_names: Callable[[QueueSettings], tuple[str, ...]] | None = None
    # The check reads the catalog through the callable the poller hands it (profiles do no I/O).
    check_table: (
        Callable[
            [QueueSettings, Callable[[TableMapping], Awaitable[TableShape]], M],
            Awaitable[None],
        ]
        | None
    ) = None

    # Hands a running mode the live settings it reads every cycle, after a reload that keeps
    # the queue's counters (exporter/settings/reload_plan.py lists them); None: it reads none.
    retune: Callable[[QueueSettings, M], None] | None = None

    # The series a queue's own settings leave out (the default profile's result paths);
    # None: ``coverage`` whatever the settings.
    settings_coverage: Callable[[QueueSettings], Coverage] | None = None

    # collect.counting: logical: the table its change stream reads (None: the profile cannot
    # count from a stream yet, and the exporter refuses the setting; docs/presets.md says why).
    logical_target: Callable[[QueueSettings], LogicalTarget] | None = None

    @property
    def maps_table(self) -> bool:
        """Whether a queue of this profile names its own table by a mapping, which the catalog
        check judges and ``indexes`` prints statements for (a preset reads its library's)."""
        return self.check_table is not None

    def coverage_for(self, settings: QueueSettings) -> Coverage:
        """The series this queue fills: the profile's, less what its settings leave out."""
        if self.settings_coverage is None:
            return self.coverage
        return self.settings_coverage(settings)

    def indexes(self, settings: QueueSettings) -> tuple[str, ...]:
        """The indexes the queue's table needs (named after a mapped table)."""
        if self.index_names is None:
            return self.required_indexes
        return self.index_names(settings)


class ChangeRules(Protocol):
    """A preset's transition function for its change stream: the fold the stream's thread runs
    (keyed by what the rules choose, e.g. graphile's task ids), and the names of those keys."""

    @property
    def lookups(self) -> Mapping[str, str]:
        """Statements run first in each cycle, whose rows :meth:`look` takes (name -> SQL)."""
        ...

    def look(self, results: Mapping[str, Sequence[Row]]) -> None:
        """Take the rows of the lookups, before the cycle's batches are counted."""
        ...

    def fold(self, buckets: Buckets) -> ChangeFold:
        """The rules the stream's thread folds each change with (the queue's buckets)."""
        ...

    def known(self, key: JobType) -> bool:
        """Whether a fold key is named already (else the next cycle's lookup names it)."""
        ...

    def name(self, key: JobType) -> str:
        """The job type name a fold key stands for."""
        ...


@dataclass(frozen=True)
class PresetLogical:
    """How a preset counts from its table's change stream (collect.counting: logical)."""

    # What it can tell from the stream (the gauges stay the reader's).
    capabilities: dict[str, Exactness]
    # The preset's transition function for its change stream.
    rules: Callable[[], ChangeRules]
    # Figures no polling preset fills that the stream does (jobs_vanished_total).
    fills: frozenset[str] = frozenset()


@dataclass(frozen=True, kw_only=True)
class Preset:
    """One library: how to read it and what it can tell (built with keywords only)."""

    name: str
    library: str
    versions: str
    # The reader class, built as (stuck_after or None for the library's own timeout, the
    # queue's ledger, the profile's coverage): the queue's counting mode.
    make_reader: type[LedgerReader]
    capabilities: dict[str, Exactness]
    retention: RetentionHint
    # The library's main table: it must exist, and its OID keys the leader election's lock.
    table: str
    index_file: str | None = None  # under exporter/profiles/sql/, to run once with psql
    required_indexes: tuple[str, ...] = ()  # the ones index_file creates
    logical: PresetLogical | None = None  # None: polling only

    def index_sql(self) -> str | None:
        """The CREATE INDEX CONCURRENTLY statements this preset needs, if any."""
        if self.index_file is None:
            return None
        return resources.files(PACKAGE).joinpath(f"sql/{self.index_file}").read_text()
