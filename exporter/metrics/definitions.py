"""Every metric the exporter defines: name, type, labels, help text and where it comes from.

The README's metric table (:func:`reference_table`), the rules, the dashboard and the tests
read these, so a name is spelled once.
"""

from __future__ import annotations

from exporter.metrics.slot import SLOT_DEFINITIONS
from exporter.metrics.spec import EVERY as _EVERY
from exporter.metrics.spec import QUEUE, MetricDefinition
from exporter.metrics.spec import define as _d

DEFINITIONS: tuple[MetricDefinition, ...] = (
    # Snapshot gauges, recomputed each cycle from the active rows and the dead count.
    _d(
        "jobqueue_jobs",
        "gauge",
        (QUEUE, "job_type", "status"),
        "Jobs currently in each status (done only with collect.done_count; dead is counted "
        f"every 20 cycles and kept from deaths and requeues in between). {_EVERY}",
        "snapshot + dead (+ done) queries",
    ),
    _d(
        "jobqueue_jobs_scheduled",
        "gauge",
        (QUEUE, "job_type"),
        f"Pending jobs whose run_after is still in the future (backoff or delay). {_EVERY}",
        "snapshot query",
    ),
    _d(
        "jobqueue_oldest_pending_age_seconds",
        "gauge",
        (QUEUE, "job_type"),
        f"Seconds since the oldest pending job was created (database clock); 0 when none. {_EVERY}",
        "snapshot query",
    ),
    _d(
        "jobqueue_oldest_ready_wait_seconds",
        "gauge",
        (QUEUE, "job_type"),
        "Seconds the oldest claimable pending job has waited for a worker since its run_after; "
        f"0 when none. {_EVERY}",
        "snapshot query",
    ),
    _d(
        "jobqueue_stuck_jobs",
        "gauge",
        (QUEUE, "job_type", "reason"),
        "Running jobs that need a human: lease_expired (lease ran out, not reaped) or overrun "
        f"(lease valid but running longer than the stuck threshold). {_EVERY}",
        "snapshot query",
    ),
    _d(
        "jobqueue_lease_expired_oldest_seconds",
        "gauge",
        (
            QUEUE,
            "job_type",
        ),
        "Seconds since the oldest expired lease of a running job ran out; 0 when none. "
        f"Grows when the reaper is not running. {_EVERY}",
        "snapshot query",
    ),
    _d(
        "jobqueue_running_oldest_seconds",
        "gauge",
        (
            QUEUE,
            "job_type",
        ),
        f"Seconds the longest current run has been going; 0 when none. {_EVERY}",
        "snapshot query",
    ),
    # Transition counters, read incrementally from rows changed since the last cycle.
    _d(
        "jobqueue_jobs_enqueued",
        "counter",
        (
            QUEUE,
            "job_type",
        ),
        f"Jobs inserted since the exporter started. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_jobs_completed",
        "counter",
        (
            QUEUE,
            "job_type",
        ),
        f"Jobs that reached DONE since the exporter started. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_job_failures",
        "counter",
        (QUEUE, "job_type", "reason"),
        "Failed attempts (retried or dead-lettered) since the exporter started, by reason: "
        f"deadline, lease_expired, error. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_jobs_dead",
        "counter",
        (QUEUE, "job_type", "reason"),
        "Jobs that reached DEAD since the exporter started, by the reason of their last "
        f"failure. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_jobs_requeued",
        "counter",
        (
            QUEUE,
            "job_type",
        ),
        f"Dead jobs put back to pending by an operator since the exporter started. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_jobs_cancelled",
        "counter",
        (QUEUE, "job_type"),
        "Jobs cancelled (by hand or by the job itself) since the exporter started; only for "
        "presets whose library cancels jobs, and for a table mapping that names "
        f"status_values.cancelled. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_cost_usd",
        "counter",
        (QUEUE, "job_type", "component"),
        "Cost in USD of jobs completed since the exporter started, from result jsonb at each "
        "component's collect.cost_ai_path, cost_proxy_path or cost_total_path (not exported "
        "when null); "
        f"component other = total - ai - proxy when positive, so sum() is the total. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_job_duration_seconds",
        "histogram",
        (
            QUEUE,
            "job_type",
        ),
        "Run time of completed jobs: the number at collect.duration_path in result (ms), else "
        f"the row's updated_at - run_started_at. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_job_wait_seconds",
        "histogram",
        (
            QUEUE,
            "job_type",
        ),
        f"Time the completing attempt waited for a worker: run_started_at - run_after. {_EVERY}",
        "changes query",
    ),
    _d(
        "jobqueue_job_latency_seconds",
        "histogram",
        (
            QUEUE,
            "job_type",
        ),
        f"Enqueue to done, retries included: completion time - created_at. {_EVERY}",
        "changes query",
    ),
    # The exporter's own health.
    _d(
        "jobqueue_up",
        "gauge",
        (QUEUE,),
        "1 when the last collection from the queue's database succeeded, else 0.",
        "poller",
    ),
    _d(
        "jobqueue_exporter_leader",
        "gauge",
        (QUEUE,),
        "1 on the exporter that holds this queue's advisory lock and collects it; 0 on a "
        "standby (which exports no other series of the queue) and until the lock is taken.",
        "election",
    ),
    _d(
        "jobqueue_exporter_last_success_timestamp_seconds",
        "gauge",
        (QUEUE,),
        "Unix time (database clock) of the last successful collection; 0 before the first.",
        "poller",
    ),
    _d(
        "jobqueue_exporter_collections",
        "counter",
        (QUEUE,),
        "Collections attempted since the exporter started.",
        "poller",
    ),
    _d(
        "jobqueue_exporter_collection_errors",
        "counter",
        (
            QUEUE,
            "reason",
        ),
        "Failed collections by reason: timeout, lock, connection, query, schema, permission, "
        "internal, stream (collect.counting: logical: the change stream failed).",
        "poller",
    ),
    _d(
        "jobqueue_exporter_collections_skipped",
        "counter",
        (QUEUE,),
        "Ticks skipped because the previous collection was still running.",
        "poller",
    ),
    _d(
        "jobqueue_exporter_collection_duration_seconds",
        "gauge",
        (QUEUE,),
        "Wall time of the last collection, successful or not.",
        "poller",
    ),
    _d(
        "jobqueue_exporter_collection_timeout_seconds",
        "gauge",
        (QUEUE,),
        "The configured deadline of one collection (collect.timeout).",
        "settings",
    ),
    _d(
        "jobqueue_exporter_query_duration_seconds",
        "gauge",
        (
            QUEUE,
            "query",
        ),
        "Wall time of the last run of each query.",
        "poller",
    ),
    _d(
        "jobqueue_exporter_jobs_vanished",
        "counter",
        (QUEUE, "last_status"),
        "Tracked pending or running jobs whose row was deleted before a collection saw them "
        "end (retention, TRUNCATE), by the status last seen; their outcome is counted nowhere.",
        "purge check",
    ),
    _d(
        "jobqueue_exporter_malformed_rows",
        "counter",
        (
            QUEUE,
            "field",
        ),
        "Completed rows whose result field was present but not a number, negative or not "
        "finite (field=result: result is a string, number, array or boolean); the field was "
        "skipped. A missing key, a JSON null or a NULL result is absent, not malformed.",
        "changes query",
    ),
    _d(
        "jobqueue_exporter_unmapped_status_rows",
        "counter",
        (QUEUE,),
        "Changed rows whose status is none of the values table.status_values names (a typo "
        "there, or a status of the table's own); such rows are in no other count. Each distinct "
        "value is logged once and named on the status page. Counted from the rows each "
        "collection reads in the background, not on scrape.",
        "changes query",
    ),
    _d(
        "jobqueue_exporter_unstamped_changes",
        "counter",
        (QUEUE, "status"),
        "Tracked pending or running jobs whose row changed without a new updated_at stamp "
        "(polling cannot read such a change), by the status the row was found in (other: one "
        "outside the four); they are in no other count. Looked for when the table holds fewer "
        "active rows than the exporter tracks; collected every interval, not on scrape.",
        "unstamped check",
    ),
    _d(
        "jobqueue_exporter_missing_index",
        "gauge",
        (QUEUE, "index"),
        "1 when an index the exporter's queries need does not exist; "
        "jobqueue-exporter indexes, given the exporter's --config.file or --database.table, "
        "prints the statement that creates it.",
        "index check",
    ),
    _d(
        "jobqueue_exporter_tracked_jobs",
        "gauge",
        (QUEUE,),
        "Jobs (or a preset's event ids) whose last seen state the exporter keeps to count exactly.",
        "tracker",
    ),
    _d(
        "jobqueue_exporter_held_jobs",
        "gauge",
        (QUEUE,),
        "Finished jobs or event ids (part of tracked_jobs) kept until the cursor passes them: "
        "grows by one per job finished while a long transaction holds the horizon back, about "
        "360 bytes each; falls when it ends.",
        "tracker",
    ),
    _d(
        "jobqueue_exporter_held_cap_exceeded",
        "gauge",
        (QUEUE,),
        "1 while held_jobs is above collect.max_held_jobs (counting stays exact, memory grows).",
        "tracker",
    ),
    _d(
        "jobqueue_exporter_lag_seconds",
        "gauge",
        (QUEUE,),
        "Database time between the last collection's snapshot and the change cursor: how far "
        "behind the counters are (a fraction of a second when caught up; grows while a long "
        "transaction holds the horizon back or a backlog is read).",
        "change cursor",
    ),
    _d(
        "jobqueue_exporter_rows_read",
        "counter",
        (QUEUE,),
        "Changed rows the collections have read; compare its rate with the queue's rate of "
        "changes (about 1 row per change).",
        "change cursor",
    ),
    _d(
        "jobqueue_exporter_job_types_folded",
        "gauge",
        (QUEUE,),
        'Distinct job_type values folded into job_type="other" by the label cap.',
        "tracker",
    ),
    _d(
        "jobqueue_exporter_config_last_reload_successful",
        "gauge",
        (),
        "1 when the last reload of the configuration (SIGHUP or POST /-/reload) succeeded or "
        "none was tried; 0 while a file that failed to load waits and the previous settings run.",
        "reload",
    ),
    _d(
        "jobqueue_exporter_config_last_reload_success_timestamp_seconds",
        "gauge",
        (),
        "Unix time (the exporter's clock) the configuration was last loaded successfully, at "
        "start-up or by a reload.",
        "reload",
    ),
    _d(
        "jobqueue_exporter_build_info",
        "gauge",
        ("version",),
        "Always 1; the version label says which build is running.",
        "build",
    ),
    *SLOT_DEFINITIONS,
)

BY_NAME: dict[str, MetricDefinition] = {d.name: d for d in DEFINITIONS}


def exposed_metric_names() -> set[str]:
    """Every series name the exporter can emit (with _total, _bucket, _sum, _count)."""
    return {n for d in DEFINITIONS for n in d.exposed_names}


def reference_table() -> str:
    """The README's metric reference, generated from DEFINITIONS (a test keeps them in step)."""
    lines = ["| metric | type | labels | meaning | from |", "|---|---|---|---|---|"]
    for d in DEFINITIONS:
        name = d.exposed_names[0] if d.type == "counter" else d.name
        labels = ", ".join(d.labels) or "—"
        lines.append(f"| `{name}` | {d.type} | {labels} | {d.help} | {d.source} |")
    return "\n".join(lines) + "\n"
