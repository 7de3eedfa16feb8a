"""What the start checks before it serves, and ``--config.check``: the start without the serving.

Before it serves, the start refuses (exit 2) a table mapping the catalog proves wrong and a
logical queue whose server cannot give what the counting needs (:func:`check_start`); its
first collection then warns about a missing index and about a status value the planner's
statistics show that no mapping names. ``--config.check`` runs every one of these through the
same functions (:func:`check_config`), and tells apart a database it cannot reach (NOT checked,
exit 0: the start serves ``jobqueue_up 0`` meanwhile) from one that refuses the login or does
not exist (exit 1: a CI gate must not pass a wrong password). A table a preset reads that does
not exist fails the check too: every collection would fail on it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace

from exporter.counting.sqltext import render_queries
from exporter.counting.statuses import StatusValues, stats_notices
from exporter.db import Database, DatabaseError
from exporter.db.catalog import check_tables, inspect_table
from exporter.db.pool import ConnectOptions
from exporter.model import Notice, TableShape
from exporter.profiles import profile_of
from exporter.settings import ConfigError, QueueSettings, Settings
from exporter.slot_commands import check_logical
from exporter.vocabulary import SCHEMA

log = logging.getLogger(__name__)
MISSING_DATABASE = "3D000"  # invalid_catalog_name; class 28 is invalid_authorization_specification


def check_start(settings: Settings, logical: bool = True) -> Settings:
    """The settings, once every reachable database's catalog agrees with its queue's table
    mapping and (``logical``) every logical queue's server can stream; ConfigError naming each
    refusal otherwise (at start-up the exporter exits, on a reload the running configuration
    stays). A database that is down is warned about and checked by its first collection."""
    mapped = [queue for queue in settings.queues if profile_of(queue).maps_table]
    for unchecked in asyncio.run(check_tables(mapped)):
        log.warning(
            "table mapping not checked now: the database cannot be reached; the first "
            "collection checks it",
            extra={"fields": {"queue": unchecked.queue, "err": unchecked.why}},
        )
    if logical:
        check_logical(settings)
    return settings


@dataclass
class QueueReport:
    """What --config.check found of one queue: proven, worth a warning, refused, or unreached."""

    queue: str
    proven: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    unchecked: str | None = None  # why the database could not be asked


@dataclass
class Report:
    """What --config.check found of every queue, and the start's logical refusals."""

    queues: list[QueueReport]
    refusals: list[str] = field(default_factory=list)

    def findings(self) -> list[str]:
        """One line per thing proven, warned about or not checked, each naming its queue."""
        said: list[str] = []
        for queue in self.queues:
            said += [f"queue {queue.queue}: {line}" for line in queue.proven]
            said += [f"queue {queue.queue}: warning: {line}" for line in queue.warnings]
            if queue.unchecked is not None:
                said.append(
                    f"queue {queue.queue}: NOT checked: the database cannot be reached "
                    f"({queue.unchecked})"
                )
        return said

    def refused(self) -> list[str]:
        """Every line of every refusal (a refusal may take several)."""
        texts = [*(text for queue in self.queues for text in queue.refusals), *self.refusals]
        return [line for text in texts for line in text.splitlines()]

    def verdict(self) -> str:
        """``OK``, with the number of warnings and the queues not checked."""
        warnings = sum(len(queue.warnings) for queue in self.queues)
        notes = [f"{warnings} warning{'s' if warnings != 1 else ''}"] if warnings else []
        unreached = [queue.queue for queue in self.queues if queue.unchecked is not None]
        if unreached:
            notes.append(f"queue {', '.join(unreached)} NOT checked")
        return "OK" + (f" ({'; '.join(notes)})" if notes else "")


def _notice(notice: Notice) -> str:
    fields = " ".join(f"{key}={value}" for key, value in notice.fields.items())
    return f"{notice.message} ({fields})" if fields else notice.message


async def _findings(queue: QueueSettings, database: Database, report: QueueReport) -> None:
    """The start's catalog check, then what its first collection would warn about."""
    profile = profile_of(queue)
    name = queue.name
    shape: TableShape | None = None
    if profile.maps_table:
        try:
            shape = await inspect_table(database, queue.mapping)
        except DatabaseError as exc:
            if exc.reason != SCHEMA or exc.sqlstate is not None:
                raise
            report.refusals.append(f"queue {name}: {exc}")  # the start's words (check_tables)
            return
        report.proven.append(f"table {queue.mapping.name} fits its database")
    table = profile.watched_table(queue)
    try:
        missing = await database.missing_indexes(table, profile.indexes(queue))
    except DatabaseError as exc:
        if exc.reason != SCHEMA or exc.sqlstate is not None:
            raise
        report.refusals.append(f"queue {name}: {exc}: every collection would fail on it")
        return
    if not profile.maps_table:
        report.proven.append(f"table {table} found")
    for index in missing:
        report.warnings.append(
            f"index {index} is missing: per-cycle queries will scan the table; "
            f"`{queue.index_command}` prints the statement that creates it"
        )
    if shape is not None:
        statement = render_queries(queue.mapping, shape)["status_values"]
        values = await database.status_values(statement)
        found = stats_notices(StatusValues.of(queue.mapping), values, set())
        report.warnings += [_notice(notice) for notice in found]


async def _inspect(queue: QueueSettings) -> QueueReport:
    report = QueueReport(queue.name)
    assert queue.database.dsn is not None
    database = Database(
        ConnectOptions(
            dsn=queue.database.dsn,
            table=queue.database.table,
            max_connections=1,
            connect_timeout=queue.database.connect_timeout,
            statement_timeout=queue.collect.statement_timeout,
            lock_timeout=queue.collect.lock_timeout,
        )
    )
    try:
        await _findings(queue, database, report)
    except DatabaseError as exc:
        if exc.sqlstate is None or exc.sqlstate[:2] in ("08", "53", "57"):
            # No answer, or the server cannot take a session now: nothing proven either way.
            report.unchecked = str(exc)
        elif exc.sqlstate.startswith("28"):
            report.refusals.append(f"queue {queue.name}: the server refused the login ({exc})")
        elif exc.sqlstate == MISSING_DATABASE:
            report.refusals.append(f"queue {queue.name}: the server has no such database ({exc})")
        else:
            report.refusals.append(f"queue {queue.name}: {exc}")
    finally:
        await database.close()
    return report


async def _inspect_all(queues: list[QueueSettings]) -> list[QueueReport]:
    return list(await asyncio.gather(*(_inspect(queue) for queue in queues)))


def check_config(settings: Settings) -> Report:
    """Every check of the start and of its first collection, on every queue with a DSN."""
    with_dsn = [queue for queue in settings.queues if queue.database.dsn]
    reports = {r.queue: r for r in asyncio.run(_inspect_all(with_dsn))} if with_dsn else {}
    report = Report([reports.get(q.name) or QueueReport(q.name) for q in settings.queues])
    # One call, as the start makes it; the queues it could not reach are left out (said once).
    unreached = {r.queue for r in report.queues if r.unchecked is not None}
    try:
        reached = tuple(q for q in settings.queues if q.name not in unreached)
        checked = check_logical(replace(settings, queues=reached), warn=False)
    except ConfigError as exc:
        report.refusals += str(exc).splitlines()
    else:
        # What was checked of each logical queue, said beside its other findings.
        by_name = {r.queue: r for r in report.queues}
        for line in checked:
            name, _, said = line.removeprefix("queue ").partition(": ")
            found = by_name.get(name)
            if found is not None:
                (found.warnings if "NOT checked" in said else found.proven).append(said)
    return report
