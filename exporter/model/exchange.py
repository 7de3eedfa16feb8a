"""What a counting mode and the database layer exchange: statements out, rows in.

No I/O: a counting mode hands out :class:`Query` values, the database layer runs them (see
docs/presets.md, "Interface") and passes the rows back; the catalog check hands the SQL its
:class:`TableShape`. Both layers import these from here, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from exporter.vocabulary import SCHEMA

if TYPE_CHECKING:
    # Only an annotation here: the package's __init__ imports this module before it defines it.
    from exporter.model import Snapshot
    from exporter.model.row_changes import StreamCounting

Row = Mapping[str, Any]
Results = Mapping[str, Sequence[Row]]

# The smallest uuid: a key (t, NIL) sorts before every row stamped t.
NIL = "00000000-0000-0000-0000-000000000000"


class CountingError(Exception):
    """Counting exactly is impossible with what the database shows (privileges, schema).

    ``reason`` is the collection-error reason the exporter reports it under.
    """

    def __init__(self, message: str, reason: str = SCHEMA) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Query:
    """One named statement with its positional arguments ($1, $2, ...)."""

    name: str
    sql: str
    args: tuple[Any, ...] = ()
    # A follow-up read (the next chunk of changes): the runner may leave it unrun once the
    # cycle's read budget is spent, and sends None back instead of rows.
    deferrable: bool = False


@dataclass(frozen=True)
class Notice:
    """Something a cycle found that is worth one log line, once: the message and its fields."""

    message: str
    fields: Mapping[str, object]


@dataclass
class Collected:
    """What one cycle of a counting mode produced: the gauges now, and how the counting went.

    The counts themselves went straight into the queue's Tallies while the rows came in.
    """

    snapshot: Snapshot
    counting: bool = True  # False until the mode has a safe baseline
    rows_read: int = 0  # rows of changes or events read this cycle
    lag: float = 0.0  # database seconds between the snapshot and the cursor
    behind: bool = False  # stopped before the cursor reached its bound: go on at once
    warnings: tuple[str, ...] = ()  # conditions worth one log line each while they last
    notices: tuple[Notice, ...] = ()  # found this cycle: one log line each, now


# A cycle yields the statements of the read-only transaction one at a time and receives each
# one's rows (None for a deferrable statement the read budget left unrun); it returns what it
# collected. Later statements may depend on rows already read (chunks of changes).
Cycle = Generator[Query, Sequence[Row] | None, Collected]


class CountingMode(Protocol):
    """One queue's counting, cycle by cycle, with no I/O (docs/presets.md, "Interface")."""

    def horizon_query(self) -> Query:
        """The statement to run in autocommit, before the cycle's snapshot."""
        ...

    def cycle(self, horizon: Row) -> Cycle:
        """The cycle's REPEATABLE READ, READ ONLY transaction, given the horizon's row."""
        ...

    @property
    def tracked(self) -> int | None:
        """How many jobs' last state is kept (None: the mode keeps no such set)."""
        ...

    @property
    def held(self) -> int | None:
        """Finished jobs kept until the cursor passes them (None: the mode keeps none)."""
        ...

    @property
    def stream(self) -> StreamCounting | None:
        """What the change stream feeds, for a mode counted from it (None: a polling mode)."""
        ...


# The smallest key of each job_id type: the keyset cursor's start (every row sorts after it).
_SENTINELS = {
    "uuid": NIL,
    "int2": str(-(2**15)),
    "int4": str(-(2**31)),
    "int8": str(-(2**63)),
}
_TEXT_SENTINEL = ""  # the empty string sorts first in every collation


@dataclass(frozen=True)
class TableShape:
    """What the catalog says about the mapped table that the SQL must follow."""

    job_id_type: str = "uuid"  # the base type's name: uuid, int2/int4/int8, text, varchar
    job_type_text: bool = False  # text (or enum) job types instead of integers
    status_padded: bool = False  # a char(n) status column: its values carry trailing blanks
    # Roles whose column is a timestamp without time zone, read in table.timestamps.time_zone.
    naive_times: frozenset[str] = frozenset()

    @property
    def cursor_start(self) -> str:
        """The job_id text that sorts before every row (the keyset cursor's sentinel)."""
        return _SENTINELS.get(self.job_id_type, _TEXT_SENTINEL)


REFERENCE_SHAPE = TableShape()
