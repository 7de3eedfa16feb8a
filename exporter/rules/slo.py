"""SLO rules per job type: error ratios and burn rates over several windows, SRE-workbook style.

Two SLOs, both per job type with overrides from the settings:

* success: the share of finished attempts that fail must stay below ``1 - slo_success_target``;
* wait: the share of started jobs that waited longer than ``slo_wait_seconds`` must stay below
  ``1 - slo_wait_target`` (from the ``jobqueue_job_wait_seconds`` histogram bucket at that bound).

``slo:*:ratio_rate<w>`` records the bad share over window ``w``; ``slo:*:burn_rate<w>`` divides
it by the job type's error budget. Alerts page when the budget burns fast over a long *and* a short
window (14.4x over 1h and 5m, 6x over 6h and 30m) and open a ticket on a slow burn (3x over 1d
and 2h, or 1x over 3d and 6h: the SRE workbook's multiwindow, multi-burn-rate table). The short
window makes an alert resolve soon after the burn stops. The 3d window needs three days of
retention; with less, its ratio is that of the history there is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from exporter.rules.promql import Builder, format_duration, number
from exporter.settings import AlertSettings

WINDOWS = (300.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0, 259200.0)
# (burn factor, long window, short window) of the page and of the ticket.
PAGE = ((14.4, 3600.0, 300.0), (6.0, 21600.0, 1800.0))
# A failure ratio that creeps up over hours burns 1x long before the 1d window reaches 3x.
TICKET = ((3.0, 86400.0, 7200.0), (1.0, 259200.0, 21600.0))
PAGE_FOR = 120.0
TICKET_FOR = 900.0

ATTEMPTS = "slo:jobqueue_attempts:increase1h"
WAITS = "slo:jobqueue_wait_events:increase1h"
# Each job type's SLO target, recorded from the settings that render the burn rates, so the
# dashboard reads the budget the alerts use instead of a constant of its own.
ATTEMPT_TARGET = "slo:jobqueue_attempt_success:target"
WAIT_TARGET = "slo:jobqueue_wait_success:target"


def go_float(value: float) -> str:
    """A histogram bound as the Python and Go clients write it in ``le`` (``300.0``, ``0.5``)."""
    return repr(float(value))


def ratio_name(slo: str, window: float) -> str:
    return f"slo:jobqueue_{slo}_errors:ratio_rate{format_duration(window)}"


def burn_name(slo: str, window: float) -> str:
    return f"slo:jobqueue_{slo}_errors:burn_rate{format_duration(window)}"


def _budget(target: float) -> str:
    return number(round(1.0 - target, 12))


def _by_type(term: Callable[[str, float], str], default: float, overrides: dict[str, float]) -> str:
    """``term(matcher, target)`` for the default and for each job type with its own target."""
    if not overrides:
        return term("", default)
    names = sorted(overrides)
    others = "{job_type!~" + '"' + "|".join(names) + '"}'
    terms = [term(others, default)]
    terms += [term("{job_type=" + '"' + name + '"}', overrides[name]) for name in names]
    return "\nor\n".join(terms)


def _burn(ratio: str, default: float, overrides: dict[str, float]) -> str:
    """The bad share divided by the job type's error budget."""
    return _by_type(lambda m, target: f"{ratio}{m} / {_budget(target)}", default, overrides)


def _target(series: str, default: float, overrides: dict[str, float]) -> str:
    """The job type's target as a series with the labels of ``series`` (one per job type)."""
    return _by_type(lambda m, target: f"{series}{m} * 0 + {number(target)}", default, overrides)


def slo_recording_rules(alerts: AlertSettings) -> list[dict[str, Any]]:
    """Bad shares and burn rates of both SLOs over every window, and the hourly event counts."""
    a = alerts
    b = Builder(a)
    rules: list[dict[str, Any]] = []
    le = f'le="{go_float(a.slo_wait_seconds)}"'
    for window in WINDOWS:
        w = format_duration(window)
        failed = b.total(f"rate({b.sel('jobqueue_job_failures_total')}[{w}])", "reason")
        completed = b.total(f"rate({b.sel('jobqueue_jobs_completed_total')}[{w}])")
        # A type whose every attempt failed has no completion series: count it as 0.
        attempts = f"(\n  {failed}\n  +\n  ({completed} or {failed} * 0)\n)"
        rules.append({"record": ratio_name("attempt", window), "expr": f"{failed}\n/\n{attempts}"})
        fast = b.total(f"rate({b.sel('jobqueue_job_wait_seconds_bucket', le)}[{w}])", "le")
        count = b.total(f"rate({b.sel('jobqueue_job_wait_seconds_count')}[{w}])")
        rules.append(
            {"record": ratio_name("wait", window), "expr": f"1 - (\n  {fast}\n  /\n  {count}\n)"}
        )
    for window in WINDOWS:
        rules.append(
            {
                "record": burn_name("attempt", window),
                "expr": _burn(
                    ratio_name("attempt", window),
                    a.slo_success_target,
                    a.slo_success_target_by_job_type,
                ),
            }
        )
        rules.append(
            {
                "record": burn_name("wait", window),
                "expr": _burn(
                    ratio_name("wait", window), a.slo_wait_target, a.slo_wait_target_by_job_type
                ),
            }
        )
    hour = 3600.0
    failed_1h = b.increase("jobqueue_job_failures_total", hour, drop="reason")
    completed_1h = b.increase("jobqueue_jobs_completed_total", hour)
    rules.append(
        {
            "record": ATTEMPTS,
            "expr": f"{failed_1h}\n+\n({completed_1h} or {failed_1h} * 0)",
        }
    )
    rules.append({"record": WAITS, "expr": b.increase("jobqueue_job_wait_seconds_count", hour)})
    rules.append(
        {
            "record": ATTEMPT_TARGET,
            "expr": _target(ATTEMPTS, a.slo_success_target, a.slo_success_target_by_job_type),
        }
    )
    rules.append(
        {
            "record": WAIT_TARGET,
            "expr": _target(WAITS, a.slo_wait_target, a.slo_wait_target_by_job_type),
        }
    )
    return rules


def _burn_expr(slo: str, levels: tuple[tuple[float, float, float], ...], floor: str) -> str:
    terms = []
    for factor, long, short in levels:
        terms.append(
            f"(\n  {burn_name(slo, long)} > {number(factor)}\n  and\n"
            f"  {burn_name(slo, short)} > {number(factor)}\n)"
        )
    return "(\n" + "\nor\n".join(terms) + "\n)\nand\n" + floor


def slo_alert_specs(alerts: AlertSettings) -> list[dict[str, Any]]:
    """The burn-rate alerts as keyword arguments of alerting._alert (page and ticket twins)."""
    a = alerts
    floor = number(a.slo_min_events_per_hour)
    job_type = "{{ $labels.job_type }}"
    queue = "{{ $labels.queue }}"
    value = '{{ $value | printf "%.1f" }}'
    specs = []
    for slo, name, what, target, floor_series in (
        (
            "attempt",
            "JobQueueErrorBudgetBurn",
            "attempts fail",
            f"{number(a.slo_success_target * 100)}% of attempts succeed",
            ATTEMPTS,
        ),
        (
            "wait",
            "JobQueueWaitBudgetBurn",
            f"jobs wait longer than {format_duration(a.slo_wait_seconds)} for a worker",
            f"{number(a.slo_wait_target * 100)}% of jobs start within "
            f"{format_duration(a.slo_wait_seconds)}",
            WAITS,
        ),
    ):
        for severity, levels, for_, speed in (
            ("critical", PAGE, PAGE_FOR, "fast"),
            ("warning", TICKET, TICKET_FOR, "slowly but steadily"),
        ):
            windows = " or ".join(
                f"{format_duration(long)} and {format_duration(short)}" for _, long, short in levels
            )
            specs.append(
                {
                    "name": name,
                    "expr": _burn_expr(slo, levels, f"{floor_series} >= {floor}"),
                    "for_": for_,
                    "severity": severity,
                    "summary": f"The error budget of a job type burns {speed}: {what}.",
                    "description": f"Job type {job_type} of queue {queue} burns its error budget "
                    f"{value} times as fast as the SLO allows (over {windows}; "
                    f"SLO default: {target}; at least {floor} events an hour).",
                }
            )
    return specs
