"""The default profile: the reference ``job`` table, or any table with its meaning described by a
``table:`` mapping, counted by the transition cursor over ``updated_at``
(exporter/counting/transitions.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from exporter.counting.results import ResultPaths
from exporter.counting.sqltext import index_name, index_names, render_queries
from exporter.counting.statuses import StatusValues
from exporter.counting.stream_mode import LogicalMode
from exporter.counting.tracker import TrackerOptions
from exporter.counting.transitions import CursorOptions, TransitionCursor
from exporter.model import (
    Coverage,
    IdentityIndex,
    JobTypeLabels,
    LogicalTarget,
    TableShape,
    Tallies,
)
from exporter.profiles.base import Profile
from exporter.settings import QueueSettings
from exporter.settings.table import TableMapping
from exporter.vocabulary import DEFAULT_PROFILE, REQUIRED_INDEXES, Status


def _paths(settings: QueueSettings) -> ResultPaths:
    collect = settings.collect
    return ResultPaths(
        collect.duration_path,
        collect.cost_ai_path,
        collect.cost_proxy_path,
        collect.cost_total_path,
    )


def _coverage(settings: QueueSettings) -> Coverage:
    """Every series, less the cost components and malformed fields of paths that are none; the
    cancellations when the mapping names a cancelled value; unstamped changes when polling."""
    paths = _paths(settings)
    base = Coverage()
    withheld = set(base.withheld)
    if not paths.cost_components():
        withheld.add("cost")
    if not paths.malformed_fields():
        withheld.add("malformed")
    if settings.mapping.cancelled:
        withheld.discard("cancelled")
    if settings.collect.counting == "logical":
        withheld.add("unstamped")  # the stream reads every change, stamped or not
    return replace(
        base,
        withheld=frozenset(withheld),
        cost_components=paths.cost_components(),
        malformed_fields=paths.malformed_fields(),
    )


def _labels(settings: QueueSettings) -> JobTypeLabels:
    collect = settings.collect
    return JobTypeLabels(collect.job_types, collect.max_job_types)


# The default profile's two counting modes: the change cursor over updated_at (polling) and the
# change stream (collect.counting: logical). Both run the same snapshot SQL and options.
DefaultMode = TransitionCursor | LogicalMode


def _mode(settings: QueueSettings, labels: JobTypeLabels, tallies: Tallies) -> DefaultMode:
    collect = settings.collect
    tracker = TrackerOptions(
        commit_lag_tolerance=collect.commit_lag_tolerance,
        deadline_prefix=collect.deadline_error_prefix,
        lease_marker=collect.lease_expired_marker,
        paths=_paths(settings),
        statuses=StatusValues.of(settings.mapping),
    )
    options = CursorOptions(
        tracker=tracker,
        max_rows=collect.max_rows_per_query,
        stuck_threshold=collect.stuck_threshold,
        done_count=collect.done_count,
        stamp=f"{settings.mapping.name}.{settings.mapping.column('updated_at')}",
    )
    # Rendered for the reference's types until _check_table has read the catalog, which the
    # poller runs before a fresh mode's first cycle.
    if collect.counting == "logical":
        return LogicalMode(render_queries(settings.mapping), options, settings.mapping, labels,
                           tallies)  # fmt: skip
    return TransitionCursor(render_queries(settings.mapping), options, labels, tallies)


async def _check_table(
    settings: QueueSettings,
    inspect: Callable[[TableMapping], Awaitable[TableShape]],
    mode: DefaultMode,
) -> None:
    """The mapping checked against the catalog by ``inspect`` (the poller passes the database
    layer's, which raises DatabaseError "schema" naming each mistake), and the mode's SQL
    rendered for the table's real types (its job_id's, its job_type's)."""
    mode.sql = render_queries(settings.mapping, await inspect(settings.mapping))


def _index_names(settings: QueueSettings) -> tuple[str, ...]:
    # The stream replaces the change cursor, and with it the updated_at index.
    names = index_names(settings.mapping)
    if settings.collect.counting != "logical":
        return names
    return tuple(n for n in names if n != index_name(settings.mapping, "updated_at"))


def _retune(settings: QueueSettings, mode: DefaultMode) -> None:
    collect = settings.collect
    mode.options = replace(
        mode.options, stuck_threshold=collect.stuck_threshold, done_count=collect.done_count
    )


# The roles the change stream's count reads (exporter/counting/stream_counter.py): a
# publication's column list carries these and no more (payload stays out of the stream).
STREAMED_ROLES = (
    "job_id", "job_type", "status", "attempts", "run_after", "run_started_at", "result",
    "last_error", "created_at", "updated_at",
)  # fmt: skip
IDENTITY_ROLES = ("job_id", "status", "attempts")


def _logical_target(settings: QueueSettings) -> LogicalTarget:
    # An identity index of (job_id, status, attempts) gives the old status and attempts of
    # every change that moves either, and no old row otherwise (a heartbeat). It is exact only
    # where each transition writes what the count reads from it (result and updated_at at the
    # completion, last_error at a failure): an unchanged TOASTed value arrives without its
    # value, and nothing older can fill it in. The reference schema's contract says so
    # (exporter/sql/schema.sql); a table mapped onto an application of its own may not, so
    # logical-setup gives it FULL and offers the index with that condition (docs/logical.md).
    mapping = settings.mapping
    return LogicalTarget(
        settings.database.table,
        mapping.column("status"),
        mapping.column("attempts"),
        columns=tuple(mapping.column(role) for role in STREAMED_ROLES),
        index=IdentityIndex(
            index_name(mapping, "identity"),
            tuple(mapping.column(role) for role in IDENTITY_ROLES),
            exact=_reference_shaped(mapping),
        ),
        done_value=mapping.value(Status.DONE),
    )


def _reference_shaped(mapping: TableMapping) -> bool:
    """The reference's columns and status values, whatever the table's name."""
    reference = TableMapping()
    return dict(mapping.columns) == dict(reference.columns) and mapping.reference_statuses


DEFAULT: Profile[DefaultMode] = Profile(
    name=DEFAULT_PROFILE,
    coverage=Coverage(),
    settings_coverage=_coverage,
    required_indexes=REQUIRED_INDEXES,
    watched_table=lambda settings: settings.database.table,
    make_labels=_labels,
    make_mode=_mode,
    index_names=_index_names,
    check_table=_check_table,
    retune=_retune,
    logical_target=_logical_target,
)
