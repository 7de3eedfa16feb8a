"""The Prometheus side: every metric name and help text (definitions), and the collector that
renders the model (collector). Only this package knows prometheus-client and metric names."""

from prometheus_client import CONTENT_TYPE_LATEST

from exporter.metrics.collector import QueueCollector, build_registry, render
from exporter.metrics.definitions import (
    BY_NAME,
    DEFINITIONS,
    exposed_metric_names,
    reference_table,
)
from exporter.metrics.spec import QUEUE, MetricDefinition

CONTENT_TYPE = CONTENT_TYPE_LATEST

__all__ = [
    "BY_NAME",
    "CONTENT_TYPE",
    "DEFINITIONS",
    "QUEUE",
    "MetricDefinition",
    "QueueCollector",
    "build_registry",
    "exposed_metric_names",
    "reference_table",
    "render",
]
