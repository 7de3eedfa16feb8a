"""jobqueue-exporter: Prometheus exporter and alerting sidecar for a PostgreSQL job queue."""

__version__ = "0.1.0"
