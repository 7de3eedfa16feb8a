"""Every setting, declared once: frozen dataclasses whose fields say their kind, default and help.

Sections ``database``, ``collect`` and ``queue`` describe one queue; the top level holds one
set of them, and each entry of a ``queues:`` list inherits it and overrides what it names.
``web``, ``log`` and ``alerts`` belong to the process.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

from exporter.redaction import Redactor
from exporter.settings.alert_thresholds import AlertSettings
from exporter.settings.declaration import setting
from exporter.settings.kinds import Kind, parse_listen_address
from exporter.settings.secrets import dsn_password, dsn_secrets
from exporter.settings.table import TableMapping
from exporter.vocabulary import DEFAULT_PROFILE, PROFILE_ALIASES, PROFILES, PROJECT

DSN_ENV = "JOBQUEUE_EXPORTER_DSN"
DSN_FALLBACK_ENV = "DATABASE_URL"
LOG_LEVELS = ("debug", "info", "warn", "error")
RESERVED_PATHS = ("/", "/healthz", "/readyz", "/-/reload", "/-/healthy", "/-/ready")

DEFAULT_DURATION_BUCKETS: tuple[float, ...] = (
    0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200,
)  # fmt: skip
# From 5 ms (a healthy queue's claim latency) to 2 h (a backlog nobody drains), so the
# percentiles of both a busy demo and a stuck production queue land inside a bucket.
DEFAULT_WAIT_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
    7200,
)  # fmt: skip
DEFAULT_LATENCY_BUCKETS: tuple[float, ...] = (
    1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200,
)  # fmt: skip


COUNTING_MODES = ("polling", "logical")
MAX_SLOT_NAME = 63  # NAMEDATALEN - 1


def slot_name(value: str | None) -> None:
    """A replication slot's name: lower-case letters, digits and underscores (null: derived)."""
    if value is None:
        return
    if (
        not value
        or len(value) > MAX_SLOT_NAME
        or not all(c.isascii() and (c.islower() or c.isdigit() or c == "_") for c in value)
    ):
        raise ValueError(f"must be 1 to {MAX_SLOT_NAME} lower-case letters, digits and underscores")


def publication_names(value: str | None) -> None:
    """One publication's name, or two separated by a comma (the second publishes the filtered
    deletes logical-setup offers); each spelled as a slot's name (null: the slot's name)."""
    if value is None:
        return
    names = value.split(",")
    if len(names) > 2:
        raise ValueError("must be one publication, or two separated by a comma")
    for name in names:
        slot_name(name)


def positive(value: float) -> None:
    """Refuse zero."""
    if value <= 0:
        raise ValueError("must be greater than 0")


def positive_or_null(value: float | None) -> None:
    """Refuse zero; null means the documented default."""
    if value is not None and value <= 0:
        raise ValueError("must be greater than 0 (or null for the default)")


def at_least_one(value: int) -> None:
    """Refuse zero."""
    if value < 1:
        raise ValueError(f"must be at least 1, got {value}")


def connection_limit(value: int) -> None:
    """The pool is small on purpose: it runs next to a production queue."""
    if not 1 <= value <= 10:
        raise ValueError(f"must be from 1 to 10, got {value}")


def not_reserved(path: str) -> None:
    """The telemetry path cannot shadow the exporter's own endpoints."""
    if path in RESERVED_PATHS:
        raise ValueError(f"{path} is taken by the exporter itself")


def listen_addresses(addresses: tuple[str, ...]) -> None:
    """Every address parses (the kind already checked) and no port is bound twice."""
    seen: set[tuple[str, int]] = set()
    for address in addresses:
        host, port = parse_listen_address(address)
        if port and (host, port) in seen:
            raise ValueError(f"{address} is listed twice")
        seen.add((host, port))


@dataclass(frozen=True)
class DatabaseSettings:
    """Where one queue lives and how the exporter connects to it."""

    dsn: str | None = setting(
        Kind.DSN,
        None,
        "PostgreSQL URL of the queue's database (postgresql://user@host:5432/db); also "
        f"{DSN_ENV} or {DSN_FALLBACK_ENV}.",
        optional=True,
        secret=True,
        env=DSN_ENV,
        per_queue=True,
    )
    password_file: str | None = setting(
        Kind.FILE, None, "File holding the database password (trailing newline stripped).",
        optional=True, per_queue=True,
    )  # fmt: skip
    table: str = setting(
        Kind.TABLE, "job", "Table of the queue, optionally schema-qualified (the short form "
        "of a table: mapping, which also renames columns).", per_queue=True,
    )  # fmt: skip
    max_connections: int = setting(
        Kind.INTEGER, 2, "Connections the exporter may hold to this database (1-10), the "
        "leader election's included.", check=connection_limit,
    )  # fmt: skip
    connect_timeout: float = setting(
        Kind.DURATION, 5.0, "Deadline of opening one connection.", check=positive
    )

    def __repr__(self) -> str:
        # The DSN may carry the password; repr() ends up in logs and tracebacks.
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "dsn" and value is not None:
                value = Redactor(self.secrets)(value)
            parts.append(f"{f.name}={value!r}")
        return f"DatabaseSettings({', '.join(parts)})"

    @property
    def password(self) -> str | None:
        """The password inside the DSN (decoded), for the log redactor; None when there is none."""
        return dsn_password(self.dsn) if self.dsn is not None else None

    @property
    def secrets(self) -> frozenset[str]:
        """Every password the DSN carries (a password file's is in it by now), for the
        redactor."""
        return frozenset(dsn_secrets(self.dsn)) if self.dsn is not None else frozenset()


@dataclass(frozen=True)
class CollectSettings:
    """What one queue's collection loop reads and how often."""

    interval: float = setting(
        Kind.DURATION, 15.0, "Time between two collections' starts.", check=positive
    )
    timeout: float = setting(
        Kind.DURATION, 10.0, "Deadline of one whole collection (at least statement_timeout).",
        check=positive,
    )  # fmt: skip
    statement_timeout: float = setting(
        Kind.DURATION, 5.0, "statement_timeout of each query.", check=positive
    )
    lock_timeout: float = setting(
        Kind.DURATION, 1.0, "lock_timeout of each query (at most statement_timeout)."
    )
    stuck_threshold: float = setting(
        Kind.DURATION, 600.0, "A job running this long with a valid lease counts as stuck.",
        check=positive,
    )  # fmt: skip
    heartbeat_timeout: float | None = setting(
        Kind.DURATION, None, "Preset queues: a running job whose heartbeat (Oban: rescue_after) "
        "is older than this is stuck (null: the library's default).",
        optional=True, check=positive_or_null,
    )  # fmt: skip
    commit_lag_tolerance: float = setting(
        Kind.DURATION, 30.0, "Longest open transaction still counted without pg_read_all_stats "
        "(with it: no limit).",
    )  # fmt: skip
    max_rows_per_query: int = setting(
        Kind.INTEGER, 5000, "Changed rows read per query: a backlog is read in such chunks, "
        "for at most half of timeout per cycle.",
        check=at_least_one,
    )  # fmt: skip
    max_held_jobs: int = setting(
        Kind.INTEGER, 1_000_000, "Finished jobs held behind a long transaction (360 B each) "
        "before a warning.",
        check=at_least_one,
    )  # fmt: skip
    staleness_limit: float | None = setting(
        Kind.DURATION, None, "Withdraw queue gauges after failing this long (null: 3 intervals).",
        optional=True, check=positive_or_null,
    )  # fmt: skip
    leader_election: bool = setting(
        Kind.BOOLEAN,
        True,
        "One collector among the exporters watching the same table (an advisory lock); off "
        "only behind a transaction-pooling PgBouncer.",
    )
    done_count: bool = setting(
        Kind.BOOLEAN, False, 'Also count DONE rows for jobqueue_jobs{status="done"} (a full scan).'
    )
    max_job_types: int = setting(
        Kind.INTEGER, 50, 'At most this many job_type label values; the rest become "other".',
        check=at_least_one,
    )  # fmt: skip
    job_types: dict[int, str] = setting(
        Kind.JOB_TYPES, {}, "Label names for job_type numbers (YAML mapping, or 1=email,2=scrape)."
    )
    deadline_error_prefix: str = setting(
        Kind.STRING, "JobDeadlineExceeded", "last_error prefix of a job killed by its deadline."
    )
    lease_expired_marker: str = setting(
        Kind.STRING, " [lease-expired reclaim]", "Suffix the reaper appends to last_error."
    )
    # Each path may be none (null, or an empty flag): that figure is then not read at all, and
    # the run time comes from the row (updated_at - run_started_at), as when the key is absent.
    duration_path: tuple[str, ...] | None = setting(
        Kind.JSON_PATH, ("metrics", "duration_ms"),
        "Path in result of the run time in ms (null: updated_at - run_started_at).",
        optional=True,
    )  # fmt: skip
    cost_ai_path: tuple[str, ...] | None = setting(
        Kind.JSON_PATH, ("metrics", "cost", "ai_usd"),
        "Path in result of the AI cost in USD (null: not read).", optional=True,
    )  # fmt: skip
    cost_proxy_path: tuple[str, ...] | None = setting(
        Kind.JSON_PATH, ("metrics", "cost", "proxy_usd"),
        "Path in result of the proxy cost in USD (null: not read).", optional=True,
    )  # fmt: skip
    cost_total_path: tuple[str, ...] | None = setting(
        Kind.JSON_PATH, ("metrics", "cost", "total_usd"),
        "Path in result of the total cost in USD (null: not read).", optional=True,
    )  # fmt: skip
    counting: str = setting(
        Kind.CHOICE, "polling", "How to count transitions (docs/logical.md); 'logical-setup "
        "--help' lists the flags of logical (--collect.logical-slot, ...).",
        choices=COUNTING_MODES,
    )  # fmt: skip
    logical_slot: str | None = setting(
        Kind.STRING, None, "Replication slot of counting: logical (null: jobqueue_ and the "
        "queue name).", optional=True, check=slot_name, listed_in="logical-setup",
        per_queue=True,
    )  # fmt: skip
    logical_publication: str | None = setting(
        Kind.STRING, None, "Publication of the queue's table for counting: logical, or two "
        "separated by a comma, the second publishing deletes but a finished row's (null: the "
        "slot's name).", optional=True, check=publication_names, listed_in="logical-setup",
        per_queue=True,
    )  # fmt: skip
    logical_allow_unbounded_wal: bool = setting(
        Kind.BOOLEAN, False, "Start counting: logical although max_slot_wal_keep_size is -1: a "
        "stopped exporter then keeps WAL until the disk is full.", listed_in="logical-setup",
    )  # fmt: skip
    duration_buckets: tuple[float, ...] = setting(
        Kind.BUCKETS, DEFAULT_DURATION_BUCKETS,
        "Histogram bounds (seconds) of jobqueue_job_duration_seconds.",
    )  # fmt: skip
    wait_buckets: tuple[float, ...] = setting(
        Kind.BUCKETS, DEFAULT_WAIT_BUCKETS,
        "Histogram bounds (seconds) of jobqueue_job_wait_seconds.",
    )  # fmt: skip
    latency_buckets: tuple[float, ...] = setting(
        Kind.BUCKETS, DEFAULT_LATENCY_BUCKETS,
        "Histogram bounds (seconds) of jobqueue_job_latency_seconds.",
    )  # fmt: skip

    @property
    def effective_staleness_limit(self) -> float:
        """Seconds of failed collections after which queue gauges are withdrawn."""
        return self.staleness_limit if self.staleness_limit is not None else 3 * self.interval


@dataclass(frozen=True)
class QueueOptions:
    """The ``queue:`` section: what the queue is called and whose tables it reads."""

    name: str | None = setting(
        Kind.NAME, None, "The queue label (null: the preset's own name, else the DSN's "
        "database name).",
        optional=True, per_queue=True,
    )  # fmt: skip
    profile: str = setting(
        Kind.CHOICE, DEFAULT_PROFILE, "Whose tables: default, or a library's.",
        choices=PROFILES, choices_in="docs/presets.md",
        aliases=PROFILE_ALIASES, per_queue=True,
    )  # fmt: skip


@dataclass(frozen=True)
class QueueSettings:
    """One watched queue, resolved: its name, database, collection settings and table mapping."""

    name: str
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    collect: CollectSettings = field(default_factory=CollectSettings)
    profile: str = DEFAULT_PROFILE
    # The default profile's columns and status values; database.table names the table.
    table: TableMapping = field(default_factory=TableMapping)
    # The command that prints this queue's CREATE INDEX statements, with the flags that
    # resolve its table as this process did (what the missing-index warning tells to run).
    index_command: str = field(default=f"{PROJECT} indexes", compare=False)

    @property
    def mapping(self) -> TableMapping:
        """The table mapping, named as database.table says (the loader keeps the two equal)."""
        if self.table.name == self.database.table:
            return self.table
        return replace(self.table, name=self.database.table)


@dataclass(frozen=True)
class WebSettings:
    """The HTTP side: where to listen and what to serve."""

    listen_address: tuple[str, ...] = setting(
        Kind.LISTEN_ADDRESS, (":10049",), "Addresses to serve HTTP on (repeat the flag for "
        "several: IPv4 and IPv6 at once).", check=listen_addresses,
    )  # fmt: skip
    telemetry_path: str = setting(
        Kind.URL_PATH, "/metrics", "Path of the metrics.", check=not_reserved
    )
    config_file: str | None = setting(
        Kind.FILE, None, "exporter-toolkit web config file (TLS, basic auth, headers).",
        optional=True, flag="--web.config.file",
    )  # fmt: skip
    enable_lifecycle: bool = setting(
        Kind.BOOLEAN, False, "Serve POST /-/reload (as Prometheus does with the same flag)."
    )
    systemd_socket: bool = setting(
        Kind.BOOLEAN, False, "Serve on the sockets systemd passes, not the listen addresses."
    )  # fmt: skip


@dataclass(frozen=True)
class LogSettings:
    """Log level and format."""

    level: str = setting(Kind.CHOICE, "info", "Least severe level logged.", choices=LOG_LEVELS)
    format: str = setting(Kind.CHOICE, "logfmt", "Line format.", choices=("logfmt", "json"))


@dataclass(frozen=True)
class Settings:
    """Everything the exporter needs to run, resolved once at start-up (and at each reload)."""

    queues: tuple[QueueSettings, ...] = ()
    web: WebSettings = field(default_factory=WebSettings)
    log: LogSettings = field(default_factory=LogSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)

    def __repr__(self) -> str:
        # A DSN pasted into the wrong setting must not print its password either.
        text = (
            f"Settings(queues={self.queues!r}, web={self.web!r}, log={self.log!r}, "
            f"alerts={self.alerts!r})"
        )
        return Redactor(self.secrets)(text)

    @property
    def secrets(self) -> frozenset[str]:
        """Every password of every queue's DSN, for the redactor (exporter/redaction.py)."""
        return frozenset(s for queue in self.queues for s in queue.database.secrets)


# The sections one queue is made of, and those of the process.
QUEUE_SECTIONS: dict[str, type[Any]] = {
    "database": DatabaseSettings,
    "collect": CollectSettings,
    "queue": QueueOptions,
}
PROCESS_SECTIONS: dict[str, type[Any]] = {
    "web": WebSettings,
    "log": LogSettings,
    "alerts": AlertSettings,
}
