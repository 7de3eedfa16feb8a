"""Settings as frozen dataclasses, and the loader that turns YAML + environment + flags into them.

Precedence is flag > environment > file > default. Every setting has a dotted key
(``collect.interval``) that is at once its YAML path, its flag (``--collect.interval``)
and its environment variable (``JOBQUEUE_EXPORTER_COLLECT_INTERVAL``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_DURATION_BUCKETS: tuple[float, ...] = (
    0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200,
)  # fmt: skip
DEFAULT_WAIT_BUCKETS: tuple[float, ...] = (
    0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
)  # fmt: skip
DEFAULT_LATENCY_BUCKETS: tuple[float, ...] = (
    1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200,
)  # fmt: skip


class ConfigError(Exception):
    """A setting is missing, malformed or unknown; the message names the field."""


@dataclass(frozen=True)
class DatabaseSettings:
    """Where the queue lives and how the exporter connects to it."""

    dsn: str | None = None
    password_file: str | None = None
    table: str = "job"
    max_connections: int = 2
    connect_timeout: float = 5.0


@dataclass(frozen=True)
class CollectSettings:
    """What the collection loop reads and how often."""

    interval: float = 15.0
    timeout: float = 10.0
    statement_timeout: float = 5.0
    lock_timeout: float = 1.0
    stuck_threshold: float = 600.0
    commit_lag_tolerance: float = 30.0
    # None means three intervals.
    staleness_limit: float | None = None
    done_count: bool = False
    max_job_types: int = 50
    job_types: dict[int, str] = field(default_factory=dict)
    deadline_error_prefix: str = "JobDeadlineExceeded"
    lease_expired_marker: str = " [lease-expired reclaim]"
    duration_path: tuple[str, ...] = ("metrics", "duration_ms")
    cost_ai_path: tuple[str, ...] = ("metrics", "cost", "ai_usd")
    cost_proxy_path: tuple[str, ...] = ("metrics", "cost", "proxy_usd")
    cost_total_path: tuple[str, ...] = ("metrics", "cost", "total_usd")
    duration_buckets: tuple[float, ...] = DEFAULT_DURATION_BUCKETS
    wait_buckets: tuple[float, ...] = DEFAULT_WAIT_BUCKETS
    latency_buckets: tuple[float, ...] = DEFAULT_LATENCY_BUCKETS

    @property
    def effective_staleness_limit(self) -> float:
        """Seconds of failed collections after which queue gauges are withdrawn."""
        return self.staleness_limit if self.staleness_limit is not None else 3 * self.interval


@dataclass(frozen=True)
class WebSettings:
    """The HTTP side: where to listen and what to serve."""

    listen_address: str = ":10049"
    telemetry_path: str = "/metrics"
    config_file: str | None = None


@dataclass(frozen=True)
class LogSettings:
    """Log level and format (logfmt or json)."""

    level: str = "info"
    format: str = "logfmt"


@dataclass(frozen=True)
class AlertSettings:
    """Thresholds and ``for:`` durations of the shipped alert rules (seconds, USD, ratios)."""

    selector: str = 'job="jobqueue-exporter"'
    runbook_base_url: str = (
        "https://github.com/jobqueue-exporter/jobqueue-exporter/blob/main/docs/runbooks.md"
    )
    evaluation_interval: float = 30.0
    stuck_for: float = 300.0
    reaper_not_running_after: float = 600.0
    reaper_not_running_for: float = 300.0
    deadline_kills_warning_per_hour: float = 5.0
    deadline_kills_critical_per_hour: float = 30.0
    deadline_kills_window: float = 3600.0
    deadline_kills_for: float = 600.0
    cost_spike_factor: float = 3.0
    cost_spike_floor_usd: float = 5.0
    cost_spike_baseline_days: int = 7
    cost_spike_for: float = 900.0
    cost_budget_usd_per_hour: float | None = None
    cost_budget_for: float = 300.0
    backlog_stale_after: float = 900.0
    backlog_stale_for: float = 300.0
    no_progress_window: float = 900.0
    no_progress_for: float = 300.0
    failure_ratio_threshold: float = 0.5
    failure_ratio_min_attempts: float = 20.0
    failure_ratio_window: float = 3600.0
    failure_ratio_for: float = 900.0
    dead_letter_per_hour: float = 10.0
    dead_letter_for: float = 900.0
    database_unreachable_for: float = 180.0
    exporter_down_for: float = 300.0
    collection_slow_ratio: float = 0.8
    collection_slow_for: float = 900.0
    missing_index_for: float = 3600.0


@dataclass(frozen=True)
class Settings:
    """Everything the exporter needs to run, resolved once at start-up."""

    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    collect: CollectSettings = field(default_factory=CollectSettings)
    web: WebSettings = field(default_factory=WebSettings)
    log: LogSettings = field(default_factory=LogSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)
