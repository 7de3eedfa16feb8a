"""The Prometheus side: every metric name and help text, and the collector that renders the model.

Only this module knows prometheus-client and metric names. The collector rebuilds every
family from the poller's latest state on each scrape, so label values that vanished from
the queue vanish from the exposition by themselves; the scrape never touches the database.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from exporter import __version__
from exporter.model import ActiveStats, ExporterView, Histogram

STATUSES = ("pending", "running", "dead", "done")
STUCK_REASONS = ("lease_expired", "overrun")
FAILURE_REASONS = ("deadline", "lease_expired", "error")
COST_COMPONENTS = ("ai", "proxy", "other")
MALFORMED_FIELDS = ("result", "duration_ms", "ai_usd", "proxy_usd", "total_usd")
ERROR_REASONS = ("timeout", "lock", "connection", "query", "schema", "permission", "internal")

CONTENT_TYPE = CONTENT_TYPE_LATEST

_EVERY = "Collected every interval in the background, not on scrape."


@dataclass(frozen=True)
class MetricDefinition:
    """One exported metric: its name (without _total), type, labels and help text."""

    name: str
    type: str  # gauge | counter | histogram | info
    labels: tuple[str, ...]
    help: str
    source: str  # where the number comes from, for the README's metric reference

    @property
    def exposed_names(self) -> tuple[str, ...]:
        """Series names as they appear in the text exposition."""
        if self.type == "counter":
            return (self.name + "_total",)
        if self.type == "histogram":
            return (self.name + "_bucket", self.name + "_sum", self.name + "_count")
        return (self.name,)


def _d(name: str, type_: str, labels: tuple[str, ...], help_: str, source: str) -> MetricDefinition:
    return MetricDefinition(name, type_, labels, help_, source)


DEFINITIONS: tuple[MetricDefinition, ...] = (
    # Snapshot gauges, recomputed each cycle from the active rows and the dead count.
    _d(
        "jobqueue_jobs",
        "gauge",
        ("job_type", "status"),
        "Jobs currently in each status (done only with collect.done_count; dead is counted "
        f"every 20 cycles and kept from deaths and requeues in between). {_EVERY}",
        "snapshot + dead (+ done) queries",
    ),
    _d(
        "jobqueue_jobs_scheduled",
        "gauge",
        ("job_type",),
        f"Pending jobs whose run_after is still in the future (backoff or delay). {_EVERY}",
        "snapshot query",
    ),
    _d(
        "jobqueue_oldest_pending_age_seconds",
        "gauge",
        ("job_type",),
        f"Seconds since the oldest pending job was created (database clock); 0 when none. {_EVERY}",
        "snapshot query",
    ),
    _d(
        "jobqueue_oldest_ready_wait_seconds",
        "gauge",
        ("job_type",),
        "Seconds the oldest claimable pending job has waited for a worker since its run_after; "
        f"0 when none. {_EVERY}",
        "snapshot query",
    ),
    _d(
        "jobqueue_stuck_jobs",
        "gauge",
        ("job_type", "reason"),
        "Running jobs that need a human: lease_expired (lease ran out, not reaped) or overrun "
        f"(lease valid but running longer than the stuck threshold). {_EVERY}",
        "snapshot query",
    ),
    _d(
        "jobqueue_lease_expired_oldest_seconds",
        "gauge",
        ("job_type",),
        "Seconds since the oldest expired lease of a running job ran out; 0 when none. "
        f"Grows when the reaper is not running. {_EVERY}",
        "snapshot query",
    ),
    _d(
        "jobqueue_running_oldest_seconds",
        "gauge",
        ("job_type",),
        f"Seconds the longest current run has been going; 0 when none. {_EVERY}",
        "snapshot query",
    ),
    # Transition counters, read incrementally from rows changed since the last cycle.
    _d(
        "jobqueue_jobs_enqueued",
        "counter",
        ("job_type",),
        f"Jobs inserted since the exporter started. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_jobs_completed",
        "counter",
        ("job_type",),
        f"Jobs that reached DONE since the exporter started. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_job_failures",
        "counter",
        ("job_type", "reason"),
        "Failed attempts (retried or dead-lettered) since the exporter started, by reason: "
        f"deadline, lease_expired, error. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_jobs_dead",
        "counter",
        ("job_type", "reason"),
        "Jobs that reached DEAD since the exporter started, by the reason of their last "
        f"failure. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_jobs_requeued",
        "counter",
        ("job_type",),
        f"Dead jobs put back to pending by an operator since the exporter started. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_cost_usd",
        "counter",
        ("job_type", "component"),
        "Cost in USD of jobs completed since the exporter started, from result jsonb; "
        f"component other = total - ai - proxy when positive, so sum() is the total. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_job_duration_seconds",
        "histogram",
        ("job_type",),
        f"Run time of completed jobs, from result.metrics.duration_ms. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_job_wait_seconds",
        "histogram",
        ("job_type",),
        f"Time the completing attempt waited for a worker: run_started_at - run_after. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_job_latency_seconds",
        "histogram",
        ("job_type",),
        f"Enqueue to done, retries included: completion time - created_at. {_EVERY}",
        "changes query",
    ),
    # The exporter's own health.
    _d(
        "jobqueue_up",
        "gauge",
        (),
        "1 when the last collection from the queue's database succeeded, else 0.",
        "poller",
    ),
    _d(
        "jobqueue_exporter_last_success_timestamp_seconds",
        "gauge",
        (),
        "Unix time (database clock) of the last successful collection; 0 before the first.",
        "poller",
    ),
    _d(
        "jobqueue_exporter_collections",
        "counter",
        (),
        "Collections attempted since the exporter started.",
        "poller",
    ),
    _d(
        "jobqueue_exporter_collection_errors",
        "counter",
        ("reason",),
        "Failed collections by reason: timeout, lock, connection, query, schema, permission, "
        "internal.",
        "poller",
    ),
    _d(
        "jobqueue_exporter_collections_skipped",
        "counter",
        (),
        "Ticks skipped because the previous collection was still running.",
        "poller",
    ),
    _d(
        "jobqueue_exporter_collection_duration_seconds",
        "gauge",
        (),
        "Wall time of the last collection, successful or not.",
        "poller",
    ),
    _d(
        "jobqueue_exporter_collection_timeout_seconds",
        "gauge",
        (),
        "The configured deadline of one collection (collect.timeout).",
        "settings",
    ),
    _d(
        "jobqueue_exporter_query_duration_seconds",
        "gauge",
        ("query",),
        "Wall time of the last run of each query.",
        "poller",
    ),
    _d(
        "jobqueue_exporter_malformed_rows",
        "counter",
        ("field",),
        "Completed rows whose result field was missing, not a number, negative or not finite "
        "(field=result: result is not a JSON object); the field was skipped.",
        "changes query",
    ),
    _d(
        "jobqueue_exporter_missing_index",
        "gauge",
        ("index",),
        "1 when an index the exporter's queries need does not exist "
        "(see exporter/sql/indexes.sql).",
        "index check",
    ),
    _d(
        "jobqueue_exporter_tracked_jobs",
        "gauge",
        (),
        "Jobs whose last seen state the exporter keeps to count transitions exactly.",
        "tracker",
    ),
    _d(
        "jobqueue_exporter_job_types_folded",
        "gauge",
        (),
        'Distinct job_type values folded into job_type="other" by the label cap.',
        "tracker",
    ),
    _d(
        "jobqueue_exporter_build_info",
        "gauge",
        ("version",),
        "Always 1; the version label says which build is running.",
        "build",
    ),
)

BY_NAME: dict[str, MetricDefinition] = {d.name: d for d in DEFINITIONS}


def exposed_metric_names() -> set[str]:
    """Every series name the exporter can emit (with _total, _bucket, _sum, _count)."""
    return {n for d in DEFINITIONS for n in d.exposed_names}


# --- the collector -------------------------------------------------------------------------


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
    """Renders one ExporterView as metric families, built fresh on every collect()."""

    def __init__(self, view: ExporterView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        """Yield every family; queue gauges only when the view has a (fresh) snapshot."""
        if self.view.snapshot is not None:
            yield from self._snapshot_families()
        yield from self._counter_families()
        yield from self._health_families()

    def _snapshot_families(self) -> Iterator[Metric]:
        view = self.view
        snapshot = view.snapshot
        assert snapshot is not None
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
        statuses = (
            ("pending", "running", "dead", "done")
            if snapshot.done is not None
            else (
                "pending",
                "running",
                "dead",
            )
        )
        jobs = _gauge("jobqueue_jobs")
        scheduled = _gauge("jobqueue_jobs_scheduled")
        oldest_pending = _gauge("jobqueue_oldest_pending_age_seconds")
        oldest_ready = _gauge("jobqueue_oldest_ready_wait_seconds")
        stuck = _gauge("jobqueue_stuck_jobs")
        lease_oldest = _gauge("jobqueue_lease_expired_oldest_seconds")
        running_oldest = _gauge("jobqueue_running_oldest_seconds")
        # Every label seen so far is exported, with zeros, so a status that empties reads 0
        # rather than vanishing (alerts and rate() need the series to exist).
        for label in view.labels:
            group = by_label.get(label, [])
            counts = {
                "pending": sum(s.pending for s in group),
                "running": sum(s.running for s in group),
                "dead": dead.get(label, 0),
                "done": done.get(label, 0),
            }
            for status in statuses:
                jobs.add_metric([label, status], counts[status])
            scheduled.add_metric([label], sum(s.scheduled for s in group))
            oldest_pending.add_metric(
                [label], max((s.oldest_pending_age for s in group), default=0.0)
            )
            oldest_ready.add_metric([label], max((s.oldest_ready_wait for s in group), default=0.0))
            stuck.add_metric([label, "lease_expired"], sum(s.stuck_lease_expired for s in group))
            stuck.add_metric([label, "overrun"], sum(s.stuck_overrun for s in group))
            lease_oldest.add_metric(
                [label], max((s.lease_expired_oldest for s in group), default=0.0)
            )
            running_oldest.add_metric([label], max((s.running_oldest for s in group), default=0.0))
        yield from (
            jobs,
            scheduled,
            oldest_pending,
            oldest_ready,
            stuck,
            lease_oldest,
            running_oldest,
        )

    def _counter_families(self) -> Iterator[Metric]:
        tallies = self.view.tallies
        labels = self.view.labels
        enqueued = _counter("jobqueue_jobs_enqueued")
        completed = _counter("jobqueue_jobs_completed")
        failures = _counter("jobqueue_job_failures")
        dead = _counter("jobqueue_jobs_dead")
        requeued = _counter("jobqueue_jobs_requeued")
        cost = _counter("jobqueue_cost_usd")
        for label in labels:
            enqueued.add_metric([label], tallies.enqueued[label])
            completed.add_metric([label], tallies.completed[label])
            requeued.add_metric([label], tallies.requeued[label])
            for reason in FAILURE_REASONS:
                failures.add_metric([label, reason], tallies.failures[(label, reason)])
                dead.add_metric([label, reason], tallies.dead[(label, reason)])
            for component in COST_COMPONENTS:
                cost.add_metric([label, component], tallies.cost.get((label, component), 0.0))
        yield from (enqueued, completed, failures, dead, requeued, cost)
        for name, table, bounds in (
            ("jobqueue_job_duration_seconds", tallies.duration, tallies.duration_bounds),
            ("jobqueue_job_wait_seconds", tallies.wait, tallies.wait_bounds),
            ("jobqueue_job_latency_seconds", tallies.latency, tallies.latency_bounds),
        ):
            family = _histogram(name)
            for label in labels:
                histogram = table.get(label) or Histogram(bounds)
                family.add_metric([label], list(histogram.cumulative()), histogram.total)
            yield family
        malformed = _counter("jobqueue_exporter_malformed_rows")
        for field_name in MALFORMED_FIELDS:
            malformed.add_metric([field_name], tallies.malformed[field_name])
        yield malformed

    def _health_families(self) -> Iterator[Metric]:
        view = self.view
        health = view.health
        up = _gauge("jobqueue_up")
        up.add_metric([], 1 if view.up else 0)
        last = _gauge("jobqueue_exporter_last_success_timestamp_seconds")
        last.add_metric([], health.last_success_at)
        collections = _counter("jobqueue_exporter_collections")
        collections.add_metric([], health.collections)
        errors = _counter("jobqueue_exporter_collection_errors")
        for reason in sorted(set(ERROR_REASONS) | set(health.errors)):
            errors.add_metric([reason], health.errors[reason])
        skipped = _counter("jobqueue_exporter_collections_skipped")
        skipped.add_metric([], health.skipped)
        duration = _gauge("jobqueue_exporter_collection_duration_seconds")
        duration.add_metric([], health.collection_duration)
        timeout = _gauge("jobqueue_exporter_collection_timeout_seconds")
        timeout.add_metric([], view.collection_timeout)
        queries = _gauge("jobqueue_exporter_query_duration_seconds")
        for query, seconds in sorted(health.query_durations.items()):
            queries.add_metric([query], seconds)
        missing = _gauge("jobqueue_exporter_missing_index")
        for index, flag in sorted(health.missing_indexes.items()):
            missing.add_metric([index], flag)
        tracked = _gauge("jobqueue_exporter_tracked_jobs")
        tracked.add_metric([], view.tracked)
        folded = _gauge("jobqueue_exporter_job_types_folded")
        folded.add_metric([], view.folded)
        build = _gauge("jobqueue_exporter_build_info")
        build.add_metric([__version__], 1)
        yield from (
            up, last, collections, errors, skipped, duration, timeout, queries, missing, tracked,
            folded, build,
        )  # fmt: skip


def build_registry(view: ExporterView, *, process_metrics: bool = True) -> CollectorRegistry:
    """A private registry holding the queue collector for one view (and process_* metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(view))
    if process_metrics:
        ProcessCollector(registry=registry)
    return registry


def render(view: ExporterView, *, process_metrics: bool = True) -> bytes:
    """The text exposition of one view (safe to call from a worker thread)."""
    return generate_latest(build_registry(view, process_metrics=process_metrics))


def reference_table() -> str:
    """The README's metric reference, generated from DEFINITIONS (a test keeps them in step)."""
    lines = ["| metric | type | labels | meaning | from |", "|---|---|---|---|---|"]
    for d in DEFINITIONS:
        name = d.exposed_names[0] if d.type == "counter" else d.name
        labels = ", ".join(d.labels) or "—"
        lines.append(f"| `{name}` | {d.type} | {labels} | {d.help} | {d.source} |")
    return "\n".join(lines) + "\n"
