"""Thresholds and ``for:`` durations of the shipped alert rules, declared like every setting.

``jobqueue-exporter render-rules`` turns these into the rule file; docs/runbooks.md explains
each alert. Durations are seconds, money is USD, ratios are from 0 to 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.settings.kinds import Kind
from exporter.settings.spec import setting
from exporter.vocabulary import RUNBOOK_BASE_URL


@dataclass(frozen=True)
class AlertSettings:
    """Thresholds and ``for:`` durations of the shipped alert rules."""

    selector: str = setting(
        Kind.STRING,
        'job="jobqueue-exporter"',
        "Label selector added to every rule expression, matching the exporter's scrape job.",
    )
    runbook_base_url: str = setting(
        Kind.STRING,
        RUNBOOK_BASE_URL,
        "Base URL of the runbooks; each runbook_url is this plus `#` and the lowercased alert "
        "name.",
    )
    evaluation_interval: float = setting(
        Kind.DURATION,
        30.0,
        "Evaluation interval of the rendered rule groups.",
    )
    stuck_for: float = setting(
        Kind.DURATION,
        300.0,
        "`for:` of JobQueueJobsStuck.",
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
    deadline_kills_critical_per_hour: float = setting(
        Kind.NUMBER,
        30.0,
        "Deadline kills per hour that raise a critical alert.",
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
    cost_spike_factor: float = setting(
        Kind.NUMBER,
        3.0,
        "Cost per hour above this many times the baseline is a spike.",
    )
    cost_spike_floor_usd: float = setting(
        Kind.USD,
        5.0,
        "Ignore cost spikes below this many USD per hour.",
    )
    cost_spike_baseline_days: int = setting(
        Kind.INTEGER,
        7,
        "Days of history the cost baseline is taken from.",
    )
    cost_spike_for: float = setting(
        Kind.DURATION,
        900.0,
        "`for:` of JobQueueCostSpike.",
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
    keep_firing_for: float | None = setting(
        Kind.DURATION,
        None,
        "`keep_firing_for:` of every queue alert (not of the four exporter-health alerts), so it "
        "does not resolve while the exporter withdraws its gauges during an outage; null: the "
        "longer of `database_unreachable_for` and `exporter_down_for` plus 2m (7m); 0 leaves the "
        "field out (Prometheus < 2.42).",
        optional=True,
    )

    @property
    def effective_keep_firing_for(self) -> float:
        """keep_firing_for: of the queue alerts; unset, the longer blinding for: plus 2m."""
        if self.keep_firing_for is not None:
            return self.keep_firing_for
        # Two minutes cover the evaluation and scrape intervals on both sides of the gap.
        return max(self.database_unreachable_for, self.exporter_down_for) + 120.0
