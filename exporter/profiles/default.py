"""The default profile: the reference ``job`` table (or any table named by --database.table),
counted by the transition cursor over ``updated_at`` (exporter/counting/transitions.py)."""

from __future__ import annotations

from exporter.counting.cycle import CountingMode
from exporter.counting.results import ResultPaths
from exporter.counting.tracker import TrackerOptions
from exporter.counting.transitions import CursorOptions, TransitionCursor
from exporter.db import load_queries
from exporter.model import Coverage, JobTypeLabels, Tallies
from exporter.profiles.base import Profile
from exporter.settings import QueueSettings
from exporter.vocabulary import DEFAULT_PROFILE, INDEX_FILE, REQUIRED_INDEXES


def _labels(settings: QueueSettings) -> JobTypeLabels:
    collect = settings.collect
    return JobTypeLabels(collect.job_types, collect.max_job_types)


def _mode(settings: QueueSettings, labels: JobTypeLabels, tallies: Tallies) -> CountingMode:
    collect = settings.collect
    tracker = TrackerOptions(
        commit_lag_tolerance=collect.commit_lag_tolerance,
        deadline_prefix=collect.deadline_error_prefix,
        lease_marker=collect.lease_expired_marker,
        paths=ResultPaths(
            collect.duration_path,
            collect.cost_ai_path,
            collect.cost_proxy_path,
            collect.cost_total_path,
        ),
    )
    options = CursorOptions(
        tracker=tracker,
        max_rows=collect.max_rows_per_query,
        stuck_threshold=collect.stuck_threshold,
        done_count=collect.done_count,
    )
    return TransitionCursor(load_queries(settings.database.table), options, labels, tallies)


DEFAULT = Profile(
    name=DEFAULT_PROFILE,
    coverage=Coverage(),
    required_indexes=REQUIRED_INDEXES,
    index_file=INDEX_FILE,
    watched_table=lambda settings: settings.database.table,
    make_labels=_labels,
    make_mode=_mode,
)
