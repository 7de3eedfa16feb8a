"""The PromQL the panels share: the variables' selectors, deduplication, rates and SLO ratios.

Two exporter replicas may watch the same database and report the same gauges, so every
queue gauge is deduplicated (the rules' DEDUP, ``max without(instance, pod)``) before it is
summed over job types or reasons. Counters come from the queue's elected exporter only; over
a rollout the old and the new pod each hold part of a window, so counter rates and increases
are summed (a max would keep only one pod's part).
"""

from __future__ import annotations

from exporter.rules.promql import DEDUP
from exporter.rules.slo import ATTEMPT_TARGET

# Queue metrics carry job_type, exporter metrics do not; both carry job and queue.
Q = 'job=~"$job", queue=~"$queue", instance=~"$instance", job_type=~"$job_type"'
E = 'job=~"$job", queue=~"$queue", instance=~"$instance"'
# Recorded series have no instance label: the empty value matches too.
R = 'job=~"$job", queue=~"$queue", instance=~"$instance|", job_type=~"$job_type"'
# Each job type's success target, recorded by the rules from the same settings as the burn
# rates (alerts.slo_success_target and its per-type overrides), so panel and alert agree.
SUCCESS_TARGET = f"max by (job_type) ({ATTEMPT_TARGET}{{{R}}})"
ERROR_BUDGET = f"(1 - {SUCCESS_TARGET})"


def dedup(expr: str) -> str:
    """Collapse exporter replicas that report the same database facts."""
    return f"{DEDUP} ({expr})"


def rate(selector: str) -> str:
    """A per-second rate over Grafana's safe rate window."""
    return f"rate({selector}[$__rate_interval])"


def sum_by(labels: str, expr: str) -> str:
    """Sum over everything but the given labels ("" sums to one series)."""
    return f"sum by ({labels}) ({expr})" if labels else f"sum({expr})"


def counter_rate(metric: str, by: str, selector: str = Q) -> str:
    """Per-second rate of a counter, summed over pods by the given labels."""
    return sum_by(by, rate(f"{metric}{{{selector}}}"))


def quantile(q: float, histogram: str, by: str = "") -> str:
    """A quantile of a histogram over the rate window, replicas deduplicated."""
    labels = f"{by}, le" if by else "le"
    return f"histogram_quantile({q}, {counter_rate(histogram + '_bucket', labels)})"


def failure_ratio(window: str) -> str:
    """Failed attempts / finished attempts per job type over ``window``."""
    failed = sum_by("job_type", f"increase(jobqueue_job_failures_total{{{Q}}}[{window}])")
    done = sum_by("job_type", f"increase(jobqueue_jobs_completed_total{{{Q}}}[{window}])")
    return f"{failed} / ({failed} + {done})"
