"""Thresholds and ``for:`` durations of the shipped alert rules, declared like every setting.

``jobqueue-exporter render-rules`` turns these into the rule file; docs/runbooks.md explains
each alert. Durations are seconds, money is USD, ratios are from 0 to 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.settings.declaration import setting
from exporter.settings.kinds import Kind
from exporter.settings.rendering import RenderSettings


@dataclass(frozen=True)
class AlertSettings(RenderSettings):
    """Thresholds and ``for:`` durations of the shipped alert rules."""

    stuck_for: float = setting(
        Kind.DURATION,
        300.0,
        "`for:` of JobQueueJobsStuck (running jobs whose lease expired unreaped).",
    )
    overrun_after: float = setting(
        Kind.DURATION,
        1800.0,
        "A run longer than this is an overrun (JobQueueJobOverrun), unless its job type has "
        "an override.",
    )
    overrun_after_by_job_type: dict[str, float] = setting(
        Kind.BY_JOB_TYPE,
        {},
        "Per-job-type overrides of `overrun_after`.",
    )
    overrun_for: float = setting(
        Kind.DURATION,
        300.0,
        "`for:` of JobQueueJobOverrun.",
    )
    reaper_not_running_after: float = setting(
        Kind.DURATION,
        600.0,
        "Oldest expired lease age that means the reaper is not running.",
    )
    reaper_not_running_for: float = setting(
        Kind.DURATION,
        300.0,
        "`for:` of JobQueueReaperNotRunning.",
    )
    deadline_kills_warning_per_hour: float = setting(
        Kind.NUMBER,
        5.0,
        "Deadline kills per hour that raise a warning.",
    )
    deadline_kills_warning_per_hour_by_job_type: dict[str, float] = setting(
        Kind.BY_JOB_TYPE,
        {},
        "Per-job-type overrides of `deadline_kills_warning_per_hour`.",
    )
    deadline_kills_critical_per_hour: float = setting(
        Kind.NUMBER,
        30.0,
        "Deadline kills per hour that raise a critical alert.",
    )
    deadline_kills_critical_per_hour_by_job_type: dict[str, float] = setting(
        Kind.BY_JOB_TYPE,
        {},
        "Per-job-type overrides of `deadline_kills_critical_per_hour`.",
    )
    deadline_kills_window: float = setting(
        Kind.DURATION,
        3600.0,
        "Window over which deadline kills are counted.",
    )
    deadline_kills_for: float = setting(
        Kind.DURATION,
        600.0,
        "`for:` of JobQueueDeadlineKills.",
    )
    slo_success_target: float = setting(
        Kind.RATIO,
        0.99,
        "Share of attempts that must succeed (the SLO of JobQueueErrorBudgetBurn).",
    )
    slo_success_target_by_job_type: dict[str, float] = setting(
        Kind.BY_JOB_TYPE,
        {},
        "Per-job-type overrides of `slo_success_target` (ratios from 0 to 1).",
    )
    slo_wait_seconds: float = setting(
        Kind.DURATION,
        300.0,
        "Wait-time SLO: a job waiting longer than this for a worker is bad; must be one of "
        "`collect.wait_buckets`.",
    )
    slo_wait_target: float = setting(
        Kind.RATIO,
        0.99,
        "Share of jobs that must start within `slo_wait_seconds` (JobQueueWaitBudgetBurn).",
    )
    slo_wait_target_by_job_type: dict[str, float] = setting(
        Kind.BY_JOB_TYPE,
        {},
        "Per-job-type overrides of `slo_wait_target` (ratios from 0 to 1).",
    )
    slo_min_events_per_hour: float = setting(
        Kind.NUMBER,
        10.0,
        "Fewest attempts (or started jobs) in the last hour before a burn rate may alert.",
    )
    cost_spike_factor: float = setting(
        Kind.NUMBER,
        3.0,
        "Cost per hour above this many times the seasonal baseline (same hours of past "
        "weeks) is a spike.",
    )
    cost_spike_floor_usd: float = setting(
        Kind.USD,
        5.0,
        "Ignore cost spikes whose excess over the seasonal baseline is below this many USD "
        "per hour.",
    )
    cost_spike_baseline_weeks: int = setting(
        Kind.INTEGER,
        2,
        "Past weeks averaged into the seasonal cost baseline, when present (0 counts as 1).",
    )
    cost_spike_for: float = setting(
        Kind.DURATION,
        600.0,
        "`for:` of JobQueueCostSpike.",
    )
    cost_new_type_usd_per_hour: float = setting(
        Kind.USD,
        20.0,
        "A job type spending more than this per hour with no spend a week ago raises "
        "JobQueueCostNewJobType.",
    )
    cost_new_type_for: float = setting(
        Kind.DURATION,
        900.0,
        "`for:` of JobQueueCostNewJobType.",
    )
    unit_cost_factor: float = setting(
        Kind.NUMBER,
        2.0,
        "Cost per completed job above this many times last week's daily mean raises "
        "JobQueueUnitCostAnomaly.",
    )
    unit_cost_min_jobs: float = setting(
        Kind.NUMBER,
        20.0,
        "Fewest completed jobs in the last hour before the unit cost counts.",
    )
    unit_cost_for: float = setting(
        Kind.DURATION,
        1800.0,
        "`for:` of JobQueueUnitCostAnomaly.",
    )
    cost_budget_usd_per_hour: float | None = setting(
        Kind.USD,
        None,
        "Hourly cost budget in USD; null leaves JobQueueCostBudgetExceeded out.",
        optional=True,
    )
    cost_budget_for: float = setting(
        Kind.DURATION,
        300.0,
        "`for:` of JobQueueCostBudgetExceeded.",
    )
    backlog_stale_after: float = setting(
        Kind.DURATION,
        900.0,
        "Oldest claimable job waiting longer than this is a stale backlog.",
    )
    backlog_stale_after_by_job_type: dict[str, float] = setting(
        Kind.BY_JOB_TYPE,
        {},
        "Per-job-type overrides of `backlog_stale_after`.",
    )
    backlog_stale_for: float = setting(
        Kind.DURATION,
        300.0,
        "`for:` of JobQueueBacklogStale.",
    )
    no_progress_window: float = setting(
        Kind.DURATION,
        900.0,
        "Window in which pending work but no completions means no progress.",
    )
    no_progress_for: float = setting(
        Kind.DURATION,
        300.0,
        "`for:` of JobQueueNoProgress.",
    )
    drain_time_limit: float = setting(
        Kind.DURATION,
        7200.0,
        "A growing backlog that the last 30 minutes' completion rate would take longer than "
        "this to drain raises JobQueueSlowDrain.",
    )
    drain_time_for: float = setting(
        Kind.DURATION,
        900.0,
        "`for:` of JobQueueSlowDrain.",
    )
    producers_stopped_window: float = setting(
        Kind.DURATION,
        1800.0,
        "No job enqueued in this window, while the same hour last week was busy, means the "
        "producers stopped.",
    )
    producers_stopped_min_per_hour: float = setting(
        Kind.NUMBER,
        60.0,
        "Enqueued jobs per hour, the same hour a week ago, that make a silence suspicious.",
    )
    producers_stopped_for: float = setting(
        Kind.DURATION,
        900.0,
        "`for:` of JobQueueProducersStopped.",
    )
    crash_storm_ratio: float = setting(
        Kind.RATIO,
        0.2,
        "Share of attempts reclaimed by the reaper (lease expired: the worker died) above "
        "which JobQueueWorkerCrashStorm fires.",
    )
    crash_storm_min_reaped: float = setting(
        Kind.NUMBER,
        5.0,
        "Fewest reclaimed attempts in the window before the share counts.",
    )
    crash_storm_window: float = setting(
        Kind.DURATION,
        900.0,
        "Window of JobQueueWorkerCrashStorm.",
    )
    crash_storm_for: float = setting(
        Kind.DURATION,
        300.0,
        "`for:` of JobQueueWorkerCrashStorm.",
    )
    malformed_ratio: float = setting(
        Kind.RATIO,
        0.05,
        "Malformed result rows as a share of completions above which JobQueueMalformedRows "
        "fires (cost extraction is broken).",
    )
    malformed_window: float = setting(
        Kind.DURATION,
        3600.0,
        "Window of JobQueueMalformedRows.",
    )
    malformed_for: float = setting(
        Kind.DURATION,
        900.0,
        "`for:` of JobQueueMalformedRows.",
    )
    failure_ratio_threshold: float = setting(
        Kind.RATIO,
        0.5,
        "Share of failed attempts above which JobQueueHighFailureRatio fires.",
    )
    failure_ratio_min_attempts: float = setting(
        Kind.NUMBER,
        20.0,
        "Fewest attempts in the window before the ratio counts.",
    )
    failure_ratio_window: float = setting(
        Kind.DURATION,
        3600.0,
        "Window of the failure ratio.",
    )
    failure_ratio_for: float = setting(
        Kind.DURATION,
        900.0,
        "`for:` of JobQueueHighFailureRatio.",
    )
    dead_letter_per_hour: float = setting(
        Kind.NUMBER,
        10.0,
        "Dead-lettered jobs per hour above which JobQueueDeadLetterGrowing fires.",
    )
    dead_letter_window: float = setting(
        Kind.DURATION,
        3600.0,
        "Window over which dead-lettered jobs are counted.",
    )
    dead_letter_for: float = setting(
        Kind.DURATION,
        900.0,
        "`for:` of JobQueueDeadLetterGrowing.",
    )
    dead_letter_size: float = setting(
        Kind.NUMBER,
        100.0,
        "Dead jobs of one type standing above this raise JobQueueDeadLetterSize.",
    )
    dead_letter_size_for: float = setting(
        Kind.DURATION,
        1800.0,
        "`for:` of JobQueueDeadLetterSize.",
    )
    collection_error_ratio: float = setting(
        Kind.RATIO,
        0.25,
        "Share of failed collections above which JobQueueCollectionErrors fires.",
    )
    collection_error_window: float = setting(
        Kind.DURATION,
        600.0,
        "Window of JobQueueCollectionErrors.",
    )
    collection_error_for: float = setting(
        Kind.DURATION,
        300.0,
        "`for:` of JobQueueCollectionErrors.",
    )
    database_unreachable_for: float = setting(
        Kind.DURATION,
        180.0,
        "`for:` of JobQueueDatabaseUnreachable.",
    )
    exporter_down_for: float = setting(
        Kind.DURATION,
        300.0,
        "`for:` of JobQueueExporterDown.",
    )
    metrics_absent_window: float = setting(
        Kind.DURATION,
        3600.0,
        "A queue that reported `jobqueue_up` within this window and reports nothing now "
        "raises JobQueueMetricsAbsent (its exporter vanished while another pod of the job is "
        "up).",
    )
    metrics_absent_for: float = setting(
        Kind.DURATION,
        300.0,
        "`for:` of JobQueueMetricsAbsent.",
    )
    collection_slow_ratio: float = setting(
        Kind.RATIO,
        0.8,
        "Collection duration / collect.timeout above which JobQueueCollectionSlow fires.",
    )
    collection_slow_for: float = setting(
        Kind.DURATION,
        900.0,
        "`for:` of JobQueueCollectionSlow.",
    )
    missing_index_for: float = setting(
        Kind.DURATION,
        3600.0,
        "`for:` of JobQueueMissingIndex.",
    )
    label_cap_for: float = setting(
        Kind.DURATION,
        3600.0,
        "`for:` of JobQueueLabelCapReached.",
    )
    keep_firing_for: float | None = setting(
        Kind.DURATION,
        None,
        "`keep_firing_for:` of every queue alert (not of the exporter-health alerts), so it "
        "does not resolve while the exporter withdraws its gauges during an outage; null: the "
        "longest of `database_unreachable_for`, `exporter_down_for` and `metrics_absent_for` "
        "plus 2m (7m); 0 leaves the field out (Prometheus < 2.42).",
        optional=True,
    )

    @property
    def effective_keep_firing_for(self) -> float:
        """keep_firing_for: of the queue alerts; unset, the longest blinding for: plus 2m."""
        if self.keep_firing_for is not None:
            return self.keep_firing_for
        # Two minutes cover the evaluation and scrape intervals on both sides of the gap.
        blinding = (self.database_unreachable_for, self.exporter_down_for, self.metrics_absent_for)
        return max(blinding) + 120.0
