"""Presets for real PostgreSQL job-queue libraries: their SQL, and readers into our vocabulary.

Each preset has a reader (queries out, rows in, no I/O), a table of what it can count exactly,
a retention hint, and optionally an index file. See docs/presets.md for the interface and the
proofs; ``PRESETS`` is the registry the service looks names up in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Protocol

from exporter.profiles import oban, pgboss, pgqueuer, procrastinate
from exporter.profiles.base import Exactness, Query, Reading, Results, RetentionHint, Row, Tallies


class PresetReader(Protocol):
    """What the collection loop needs of a reader (docs/presets.md, "Interface")."""

    tallies: Tallies

    def horizon_query(self) -> Query:
        """The statement to run in autocommit before the cycle's transaction."""
        ...

    def queries(self, horizon: Row) -> list[Query]:
        """The statements of one REPEATABLE READ, READ ONLY transaction, in order."""
        ...

    def apply(self, results: Results) -> Reading:
        """Fold the rows of one cycle (by query name) into the tallies; return the gauges."""
        ...


@dataclass(frozen=True)
class Preset:
    """One library: how to read it and what it can tell."""

    name: str
    library: str
    versions: str
    make_reader: Callable[[float | None], PresetReader]
    capabilities: dict[str, Exactness]
    retention: RetentionHint
    index_file: str | None  # under exporter/profiles/sql/, to run once with psql
    # The library's main table: it must exist, and its OID keys the leader election's lock.
    table: str
    required_indexes: tuple[str, ...] = ()  # the ones index_file creates

    def index_sql(self) -> str | None:
        """The CREATE INDEX CONCURRENTLY statements this preset needs, if any."""
        if self.index_file is None:
            return None
        return resources.files(__name__).joinpath(f"sql/{self.index_file}").read_text()


def _pgboss(stuck_after: float | None) -> PresetReader:
    # pg-boss stores each job's own expiry and heartbeat interval: nothing to configure.
    return pgboss.PgbossReader()


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset("procrastinate", "procrastinate", ">=3.10,<3.11", procrastinate.ProcrastinateReader,
               procrastinate.CAPABILITIES, procrastinate.RETENTION, None, "procrastinate_jobs"),
        Preset("pgqueuer", "pgqueuer", ">=1.6,<1.7", pgqueuer.PgqueuerReader,
               pgqueuer.CAPABILITIES, pgqueuer.RETENTION, "pgqueuer_indexes.sql", "pgqueuer",
               ("pgqueuer_exporter_held_idx",)),
        Preset("pgboss", "pg-boss", ">=12,<13 (schema version 46)", _pgboss,
               pgboss.CAPABILITIES, pgboss.RETENTION, None, "pgboss.job"),
        Preset("oban", "oban (Python) / Oban (Elixir)", "Python 0.7; Elixir 2.x", oban.ObanReader,
               oban.CAPABILITIES, oban.RETENTION, "oban_indexes.sql", "oban_jobs",
               ("oban_jobs_completed_at_index",)),
    )
}  # fmt: skip
