"""The collector: each queue's view turned into metric families, rebuilt on every rendering.

Label values that vanished from a queue vanish from the exposition by themselves; rendering
never touches the database and runs in a worker thread on a copy of the state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from exporter import __version__
from exporter.metrics.definitions import BY_NAME
from exporter.metrics.slot import slot_metrics, stream_metrics
from exporter.model import ActiveStats, ConfigStatus, Histogram, QueueView
from exporter.vocabulary import (
    COLLECTION_ERROR_REASONS,
    LEASE_EXPIRED,
    OVERRUN,
    Status,
)


def _gauge(name: str) -> GaugeMetricFamily:
    d = BY_NAME[name]
    return GaugeMetricFamily(d.name, d.help, labels=d.labels)


def _counter(name: str) -> CounterMetricFamily:
    d = BY_NAME[name]
    return CounterMetricFamily(d.name, d.help, labels=d.labels)


def _histogram(name: str) -> HistogramMetricFamily:
    d = BY_NAME[name]
    return HistogramMetricFamily(d.name, d.help, labels=d.labels)


class QueueCollector(Collector):
    """Renders the views of every queue as metric families, built fresh on every collect()."""

    def __init__(self, views: Sequence[QueueView], config: ConfigStatus | None = None) -> None:
        self.views = list(views)
        self.config = config

    def collect(self) -> Iterator[Metric]:
        """Yield every family; a queue's gauges only while it has a (fresh) snapshot."""
        families: dict[str, Metric] = {}
        for view in self.views:
            for metric in _queue_metrics(view):
                found = families.get(metric.name)
                if found is None:
                    families[metric.name] = metric
                else:
                    found.samples.extend(metric.samples)
        yield from families.values()
        if self.config is not None:
            reloaded = _gauge("jobqueue_exporter_config_last_reload_successful")
            reloaded.add_metric([], 1 if self.config.successful else 0)
            loaded_at = _gauge("jobqueue_exporter_config_last_reload_success_timestamp_seconds")
            loaded_at.add_metric([], self.config.last_success_at)
            yield from (reloaded, loaded_at)
        build = _gauge("jobqueue_exporter_build_info")
        build.add_metric([__version__], 1)
        yield build


def _queue_metrics(view: QueueView) -> Iterator[Metric]:
    if view.snapshot is not None:
        yield from _snapshot_families(view)
    if view.tallies is not None:
        yield from _counter_families(view)
    yield from _health_families(view)


def _snapshot_families(view: QueueView) -> Iterator[Metric]:
    snapshot = view.snapshot
    assert snapshot is not None
    q = view.queue
    label_of = view.label_of
    by_label: dict[str, list[ActiveStats]] = {}
    dead: dict[str, int] = {}
    done: dict[str, int] = {}
    for job_type, stats in snapshot.active.items():
        by_label.setdefault(label_of[job_type], []).append(stats)
    for job_type, n in (snapshot.dead or {}).items():
        label = label_of[job_type]
        dead[label] = dead.get(label, 0) + n
    for job_type, n in (snapshot.done or {}).items():
        label = label_of[job_type]
        done[label] = done.get(label, 0) + n
    # A profile's coverage leaves out what it cannot tell (docs/presets.md); the default
    # schema's covers everything.
    coverage = view.coverage
    statuses = list(coverage.statuses)
    if snapshot.done is not None:
        statuses.append(Status.DONE)
    jobs = _gauge("jobqueue_jobs")
    stuck = _gauge("jobqueue_stuck_jobs")
    per_type = [
        (_gauge(name), figure)
        for name, field, figure in _PER_TYPE_GAUGES
        if field not in coverage.withheld
    ]
    # Every label seen so far is exported, with zeros, so a status that empties reads 0
    # rather than vanishing (alerts and rate() need the series to exist).
    for label in view.labels:
        group = by_label.get(label, [])
        counts = {
            Status.PENDING: sum(s.pending for s in group),
            Status.RUNNING: sum(s.running for s in group),
            Status.DEAD: dead.get(label, 0),
            Status.DONE: done.get(label, 0),
        }
        for status in statuses:
            jobs.add_metric([q, label, status.label], counts[status])
        stuck_counts = {
            LEASE_EXPIRED: sum(s.stuck_lease_expired for s in group),
            OVERRUN: sum(s.stuck_overrun for s in group),
        }
        for reason in coverage.stuck_reasons:
            stuck.add_metric([q, label, reason], stuck_counts[reason])
        for family, figure in per_type:
            family.add_metric([q, label], figure(group))
    yield from (jobs, stuck, *(family for family, _ in per_type))


def _largest(field: str) -> Callable[[list[ActiveStats]], float]:
    return lambda group: max((getattr(s, field) for s in group), default=0.0)


# The snapshot's other per-job-type gauges: the ActiveStats field each comes from (what a
# profile's coverage withholds) and how it sums up the job type's active rows.
_PER_TYPE_GAUGES: tuple[tuple[str, str, Callable[[list[ActiveStats]], float]], ...] = (
    ("jobqueue_jobs_scheduled", "scheduled", lambda group: sum(s.scheduled for s in group)),
    ("jobqueue_oldest_pending_age_seconds", "oldest_pending_age", _largest("oldest_pending_age")),
    ("jobqueue_oldest_ready_wait_seconds", "oldest_ready_wait", _largest("oldest_ready_wait")),
    (
        "jobqueue_lease_expired_oldest_seconds",
        "lease_expired_oldest",
        _largest("lease_expired_oldest"),
    ),
    ("jobqueue_running_oldest_seconds", "running_oldest", _largest("running_oldest")),
)


def _counter_families(view: QueueView) -> Iterator[Metric]:
    tallies = view.tallies
    assert tallies is not None
    q = view.queue
    withheld = view.coverage.withheld
    for name, field, by_label in (
        ("jobqueue_jobs_enqueued", "enqueued", tallies.enqueued),
        ("jobqueue_jobs_completed", "completed", tallies.completed),
        ("jobqueue_jobs_requeued", "requeued", tallies.requeued),
        ("jobqueue_jobs_cancelled", "cancelled", tallies.cancelled),
    ):
        if field in withheld:
            continue
        family = _counter(name)
        for label in view.labels:
            family.add_metric([q, label], by_label[label])
        yield family
    for name, field, by_reason in (
        ("jobqueue_job_failures", "failures", tallies.failures),
        ("jobqueue_jobs_dead", "dead", tallies.dead),
    ):
        if field in withheld:
            continue
        family = _counter(name)
        for label in view.labels:
            for reason in view.coverage.failure_reasons:
                family.add_metric([q, label, reason], by_reason[(label, reason)])
        yield family
    if "cost" not in withheld:
        cost = _counter("jobqueue_cost_usd")
        for label in view.labels:
            for component in view.coverage.cost_components:
                cost.add_metric([q, label, component], tallies.cost.get((label, component), 0.0))
        yield cost
    for name, field, table, bounds in (
        ("jobqueue_job_duration_seconds", "duration", tallies.duration, tallies.duration_bounds),
        ("jobqueue_job_wait_seconds", "wait", tallies.wait, tallies.wait_bounds),
        ("jobqueue_job_latency_seconds", "latency", tallies.latency, tallies.latency_bounds),
    ):
        if field in withheld:
            continue
        histograms = _histogram(name)
        for label in view.labels:
            histogram = table.get(label) or Histogram(bounds)
            histograms.add_metric([q, label], list(histogram.cumulative()), histogram.total)
        yield histograms
    if "malformed" not in withheld:
        malformed = _counter("jobqueue_exporter_malformed_rows")
        for field_name in view.coverage.malformed_fields:
            malformed.add_metric([q, field_name], tallies.malformed[field_name])
        yield malformed
    if "vanished" not in withheld:
        vanished = _counter("jobqueue_exporter_jobs_vanished")
        for last_status in VANISHED_STATUSES:
            vanished.add_metric([q, last_status], tallies.vanished[last_status])
        yield vanished
    if "unmapped_status" not in withheld:
        unmapped = _counter("jobqueue_exporter_unmapped_status_rows")
        unmapped.add_metric([q], sum(tallies.unmapped_status.values()))
        yield unmapped
    if "unstamped" not in withheld:
        unstamped = _counter("jobqueue_exporter_unstamped_changes")
        for status in UNSTAMPED_STATUSES:
            unstamped.add_metric([q, status], tallies.unstamped[status])
        yield unstamped


# The statuses a tracked job can vanish in: every series exists from the start.
VANISHED_STATUSES = ("pending", "running")
# The statuses a job can be found in after a change without a stamp (status_rule.code_name).
UNSTAMPED_STATUSES = ("pending", "running", "done", "dead", "cancelled", "other")


def _health_families(view: QueueView) -> Iterator[Metric]:
    q = view.queue
    health = view.health
    up = _gauge("jobqueue_up")
    up.add_metric([q], 1 if view.up else 0)
    leader = _gauge("jobqueue_exporter_leader")
    leader.add_metric([q], 1 if view.leader else 0)
    yield from (up, leader)
    if not view.collector:
        return  # a standby collects nothing: its collection figures would only mislead
    last = _gauge("jobqueue_exporter_last_success_timestamp_seconds")
    last.add_metric([q], health.last_success_at)
    collections = _counter("jobqueue_exporter_collections")
    collections.add_metric([q], health.collections)
    errors = _counter("jobqueue_exporter_collection_errors")
    for reason in sorted(set(COLLECTION_ERROR_REASONS) | set(health.errors)):
        errors.add_metric([q, reason], health.errors[reason])
    skipped = _counter("jobqueue_exporter_collections_skipped")
    skipped.add_metric([q], health.skipped)
    duration = _gauge("jobqueue_exporter_collection_duration_seconds")
    duration.add_metric([q], health.collection_duration)
    timeout = _gauge("jobqueue_exporter_collection_timeout_seconds")
    timeout.add_metric([q], view.collection_timeout)
    queries = _gauge("jobqueue_exporter_query_duration_seconds")
    for query, seconds in sorted(health.query_durations.items()):
        queries.add_metric([q, query], seconds)
    missing = _gauge("jobqueue_exporter_missing_index")
    for index, flag in sorted(health.missing_indexes.items()):
        missing.add_metric([q, index], flag)
    folded = _gauge("jobqueue_exporter_job_types_folded")
    folded.add_metric([q], view.folded)
    lag = _gauge("jobqueue_exporter_lag_seconds")
    lag.add_metric([q], health.lag_seconds)
    rows_read = _counter("jobqueue_exporter_rows_read")
    rows_read.add_metric([q], health.rows_read)
    yield from (last, collections, errors, skipped, duration, timeout, queries, missing)
    if view.tracked is not None and "tracked" not in view.coverage.withheld:
        tracked = _gauge("jobqueue_exporter_tracked_jobs")
        tracked.add_metric([q], view.tracked)
        yield tracked
    if view.held is not None and "tracked" not in view.coverage.withheld:
        held = _gauge("jobqueue_exporter_held_jobs")
        held.add_metric([q], view.held.jobs)
        exceeded = _gauge("jobqueue_exporter_held_cap_exceeded")
        exceeded.add_metric([q], 1 if view.held.exceeded else 0)
        yield from (held, exceeded)
    yield from (folded, lag, rows_read)
    if view.slot is not None:
        yield from slot_metrics(q, view.slot)
    if view.stream is not None:
        yield from stream_metrics(q, view.stream)


def build_registry(
    views: Sequence[QueueView],
    *,
    process_metrics: bool = True,
    config: ConfigStatus | None = None,
) -> CollectorRegistry:
    """A private registry holding the queues' collector (and process_* metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(views, config))
    if process_metrics:
        ProcessCollector(registry=registry)
    return registry


def render(
    views: Sequence[QueueView],
    *,
    process_metrics: bool = True,
    config: ConfigStatus | None = None,
) -> bytes:
    """The text exposition of the queues' views (safe to call from a worker thread)."""
    return generate_latest(build_registry(views, process_metrics=process_metrics, config=config))
