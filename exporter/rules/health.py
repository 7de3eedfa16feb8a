"""Alerts on the exporter's own health: reachability, scrapes, collections, indexes, label cap,
status values the table mapping does not name, changes written without a stamp.

These read series that stay while the queue's database is away, so they need no
``keep_firing_for:`` (see promql.HEALTH_ALERTS).
"""

from __future__ import annotations

from typing import Any

from exporter.rules.promql import (
    DEDUP,
    JOB,
    QUEUE,
    VALUE_COUNT,
    VALUE_RATIO,
    Builder,
    format_duration,
    number,
    selector_labels,
)
from exporter.settings import AlertSettings
from exporter.vocabulary import OTHER

# A row in a status no mapping names is in no count: one is proof enough, and the alert stays
# an hour after the last one so that a rare value is seen.
UNMAPPED_WINDOW = 3600.0
UNMAPPED_FOR = 60.0
# A change without a stamp is as sure a sign of a broken contract, and as rare per statement:
# the same window and wait.
UNSTAMPED_WINDOW = UNMAPPED_WINDOW
UNSTAMPED_FOR = UNMAPPED_FOR
# Past collect.max_held_jobs the counts stay exact and only memory grows (about 360 bytes a job),
# so a pg_dump of a few minutes is no news; one that outlasts this wait deserves a look.
HELD_CAP_FOR = 900.0


def health_alert_specs(alerts: AlertSettings) -> list[dict[str, Any]]:
    """The exporter-health alerts as keyword arguments of alerting._alert."""
    a = alerts
    b = Builder(a)
    n = number
    d = format_duration
    hold = a.effective_keep_firing_for
    held = (
        f"queue alerts are inhibited, and held firing for {d(hold)} "
        "rather than resolved while the exporter withdraws the queue's gauges."
        if hold > 0
        else "queue alerts are inhibited."
    )
    up = b.sel("up")
    jobqueue_up = b.sel("jobqueue_up")
    aw = d(a.metrics_absent_window)
    ew = d(a.collection_error_window)
    errors = b.total(f"rate({b.sel('jobqueue_exporter_collection_errors_total')}[{ew}])", "reason")
    attempts = b.total(f"rate({b.sel('jobqueue_exporter_collections_total')}[{ew}])")
    duration = b.gap(b.sel("jobqueue_exporter_collection_duration_seconds"), "avg_over_time")
    timeout = b.sel("jobqueue_exporter_collection_timeout_seconds")
    unmapped = b.increase("jobqueue_exporter_unmapped_status_rows_total", UNMAPPED_WINDOW)
    unstamped = b.increase(
        "jobqueue_exporter_unstamped_changes_total", UNSTAMPED_WINDOW, drop="status"
    )
    return [
        {
            "name": "JobQueueDatabaseUnreachable",
            "expr": "job:jobqueue_up:max == 0",
            "for_": a.database_unreachable_for,
            "severity": "critical",
            "summary": "The exporter cannot reach the queue's database.",
            "description": f"No exporter of queue {QUEUE} in {JOB} could collect from the "
            f"queue's database for {d(a.database_unreachable_for)} "
            f"(jobqueue_up = {{{{ $value }}}}); {held}",
        },
        {
            "name": "JobQueueCollectionErrors",
            # A flaky database (down minutes, up seconds) never holds jobqueue_up at 0 for a
            # whole for:, but its error ratio stays high.
            "expr": f"{errors}\n/\n{attempts}\n> {n(a.collection_error_ratio)}",
            "for_": a.collection_error_for,
            "severity": "critical",
            "summary": "Many collections from the queue's database fail.",
            "description": f"{VALUE_RATIO} of the collections of queue {QUEUE} in {JOB} failed "
            f"over the last {ew} (threshold {n(a.collection_error_ratio * 100)}%); queue "
            "metrics are intermittently stale and gauge alerts are unreliable.",
        },
        {
            "name": "JobQueueExporterDown",
            "expr": f"{DEDUP} ({up}) == 0\nor\nabsent({up})",
            "for_": a.exporter_down_for,
            "severity": "critical",
            "summary": "The jobqueue exporter is down or not scraped.",
            "description": f"No scrape target of job {JOB} ({{{a.selector}}}) has been up for "
            f"{d(a.exporter_down_for)}; every queue alert is blind.",
            # absent() keeps only equality matchers (none under a comparison): inhibition
            # matches on job, so the selector's equality matchers are also static labels.
            "labels": selector_labels(a.selector),
        },
        {
            "name": "JobQueueMetricsAbsent",
            # Pods of one job serving different queues: up of the live pod hides the dead one
            # from ExporterDown, and the dead pod's queue has no jobqueue_up at all (not a 0)
            # for DatabaseUnreachable. Pods are dropped on both sides, so a rollout's old pod
            # does not count as a missing queue.
            "expr": f"{DEDUP} (count_over_time({jobqueue_up}[{aw}])) > 0\n"
            "unless on(job, namespace, queue)\n"
            f"{jobqueue_up}",
            "for_": a.metrics_absent_for,
            "severity": "critical",
            "summary": "A queue's metrics are gone: its exporter vanished or is not scraped.",
            "description": f"Queue {QUEUE} in {JOB} reported jobqueue_up within the last {aw} "
            f"but has reported nothing for {d(a.metrics_absent_for)}, while other targets of "
            f"the job are up; {held}",
        },
        {
            "name": "JobQueueCollectionSlow",
            "expr": f"{DEDUP} (\n  {duration}\n  /\n  {timeout}\n) > {n(a.collection_slow_ratio)}",
            "for_": a.collection_slow_for,
            "severity": "warning",
            "summary": "Collections from the queue's database are close to their timeout.",
            "description": f"Collections of queue {QUEUE} in {JOB} take {VALUE_RATIO} of their "
            f"timeout (threshold {n(a.collection_slow_ratio * 100)}%); metrics go stale when "
            "they time out.",
        },
        {
            "name": "JobQueueMissingIndex",
            "expr": f"{DEDUP} ({b.sel('jobqueue_exporter_missing_index')}) > 0",
            "for_": a.missing_index_for,
            "severity": "info",
            "summary": "An index the exporter's queries need is missing.",
            "description": "Index {{ $labels.index }} is missing on the table of queue "
            f"{QUEUE} in {JOB} (missing_index = {{{{ $value }}}}); `jobqueue-exporter indexes` "
            "with the exporter's --config.file prints the statement that creates it.",
        },
        {
            "name": "JobQueueLabelCapReached",
            "expr": f"{DEDUP} ({b.gap(b.sel('jobqueue_exporter_job_types_folded'))}) > 0",
            "for_": a.label_cap_for,
            "severity": "info",
            "summary": f'Job types beyond the label cap are folded into job_type="{OTHER}".',
            "description": f"{{{{ $value }}}} job types of queue {QUEUE} in {JOB} are folded into "
            f'job_type="{OTHER}": their alerts and panels are merged; raise the label cap or name '
            "the job types.",
        },
        {
            "name": "JobQueueHeldJobsCapExceeded",
            "expr": f"{DEDUP} ({b.sel('jobqueue_exporter_held_cap_exceeded')}) > 0",
            "for_": HELD_CAP_FOR,
            "severity": "warning",
            "summary": "A long transaction keeps the exporter holding finished jobs past its cap.",
            "description": f"The exporter of queue {QUEUE} in {JOB} has held more finished jobs "
            f"than collect.max_held_jobs for {d(HELD_CAP_FOR)} (held_cap_exceeded = "
            "{{ $value }}): a transaction open since before "
            "they finished holds its counting horizon back. Counts stay exact; its memory grows "
            "by about 360 bytes a job until that transaction ends.",
        },
        {
            "name": "JobQueueUnmappedStatus",
            "expr": f"{unmapped} > 0",
            "for_": UNMAPPED_FOR,
            "severity": "warning",
            "summary": "Rows carry a status value the table mapping does not name.",
            "description": f"{VALUE_COUNT} changed rows of queue {QUEUE} in {JOB} "
            f"had a status none of table.status_values maps over the last {d(UNMAPPED_WINDOW)}; "
            "they are in no count, so the dead-letter and completion alerts may be blind. The "
            "exporter's log and status page name the values.",
        },
        {
            "name": "JobQueueUnstampedChanges",
            "expr": f"{unstamped} > 0",
            "for_": UNSTAMPED_FOR,
            "severity": "warning",
            "summary": "Jobs change without an updated_at stamp: polling cannot count them.",
            "description": f"{VALUE_COUNT} tracked jobs of queue {QUEUE} in {JOB} changed "
            f"without a new updated_at over the last {d(UNSTAMPED_WINDOW)}; their outcomes are "
            "in no count. Every transition must set updated_at = now() (or a trigger must), or "
            "the queue can count from the change stream (collect.counting: logical). The "
            "exporter's log names the column and a job.",
        },
    ]
