"""The logical counting mode's replication slot: the metrics that say whether it is safe.

A slot keeps every WAL segment from its restart position on, so a consumer that stops
confirming fills the database's disk, or, under max_slot_wal_keep_size, loses the slot and with
it some transitions. These series exist only for queues that count from the WAL, and only on
the pod that streams (the leader).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from exporter.metrics.spec import QUEUE, MetricDefinition, define
from exporter.model import WAL_STATUSES, SlotHealth, StreamHealth
from exporter.vocabulary import STREAM_RESTART_REASONS

_SOURCE = "pg_replication_slots"

SLOT_DEFINITIONS: tuple[MetricDefinition, ...] = (
    define(
        "jobqueue_exporter_logical_lag_bytes",
        "gauge",
        (QUEUE,),
        "Bytes of WAL between the server's current position and the slot's confirmed one "
        "(collect.counting: logical): changes decoded but not yet carried by a scrape, or not "
        "yet decoded. Grows while the exporter falls behind or nothing scrapes it.",
        _SOURCE,
    ),
    define(
        "jobqueue_exporter_logical_retained_bytes",
        "gauge",
        (QUEUE,),
        "Bytes of WAL the server keeps on disk for the slot (current position minus the slot's "
        "restart position, which a long transaction on any table holds back).",
        _SOURCE,
    ),
    define(
        "jobqueue_exporter_logical_safe_wal_bytes",
        "gauge",
        (QUEUE,),
        "Bytes of WAL that can still be written before the server invalidates the slot "
        "(pg_replication_slots.safe_wal_size); absent when max_slot_wal_keep_size is -1.",
        _SOURCE,
    ),
    define(
        "jobqueue_exporter_logical_slot_wal_status",
        "gauge",
        (QUEUE, "wal_status"),
        "1 for the slot's wal_status (reserved, extended, unreserved, lost), 0 for the others: "
        "unreserved means the next checkpoint may remove WAL the slot needs.",
        _SOURCE,
    ),
    define(
        "jobqueue_exporter_logical_gaps",
        "counter",
        (QUEUE,),
        "Times the exporter found its slot invalidated or gone and counted on from a new one: "
        "the transitions in between are missing from every counter.",
        "slot check",
    ),
    define(
        "jobqueue_exporter_logical_stream_restarts",
        "counter",
        (QUEUE, "reason"),
        "Times the change stream ended on an error and was started again, by reason (from the "
        "SQLSTATE): connect (no connection: address, pg_hba.conf, password), lost (broke while "
        "streaming, or its peer went silent), in_use (another process reads the slot), "
        "permission, setup (the server refused the slot or publication), decode, internal. "
        'Each also fails that collection (collection_errors_total{reason="stream"}).',
        "stream thread",
    ),
    define(
        "jobqueue_exporter_logical_confirm_timeouts",
        "counter",
        (QUEUE,),
        "/metrics responses that left before the slot was confirmed at the counts they carried "
        "(the stream could not send its feedback within 1 s); a leader killed right after one "
        "leaves its successor those counts to count again.",
        "stream thread",
    ),
)

_BY_NAME = {d.name: d for d in SLOT_DEFINITIONS}


def _gauge(name: str) -> GaugeMetricFamily:
    d = _BY_NAME[name]
    return GaugeMetricFamily(d.name, d.help, labels=d.labels)


def slot_metrics(queue: str, slot: SlotHealth) -> Iterator[Metric]:
    """The slot's families for one queue."""
    lag = _gauge("jobqueue_exporter_logical_lag_bytes")
    lag.add_metric([queue], slot.lag_bytes)
    retained = _gauge("jobqueue_exporter_logical_retained_bytes")
    retained.add_metric([queue], slot.retained_bytes)
    yield from (lag, retained)
    if slot.safe_wal_bytes is not None:
        safe = _gauge("jobqueue_exporter_logical_safe_wal_bytes")
        safe.add_metric([queue], slot.safe_wal_bytes)
        yield safe
    status = _gauge("jobqueue_exporter_logical_slot_wal_status")
    for value in WAL_STATUSES:
        status.add_metric([queue, value], 1 if slot.wal_status == value else 0)
    gaps_def = _BY_NAME["jobqueue_exporter_logical_gaps"]
    gaps = CounterMetricFamily(gaps_def.name, gaps_def.help, labels=gaps_def.labels)
    gaps.add_metric([queue], slot.gaps)
    yield from (status, gaps)


def stream_metrics(queue: str, stream: StreamHealth) -> Iterator[Metric]:
    """The stream's own families for one queue: every restart reason, zeros included."""
    restarts_def = _BY_NAME["jobqueue_exporter_logical_stream_restarts"]
    restarts = CounterMetricFamily(restarts_def.name, restarts_def.help, labels=restarts_def.labels)
    for reason in sorted(set(STREAM_RESTART_REASONS) | set(stream.restarts)):
        restarts.add_metric([queue, reason], stream.restarts.get(reason, 0))
    timeouts_def = _BY_NAME["jobqueue_exporter_logical_confirm_timeouts"]
    timeouts = CounterMetricFamily(timeouts_def.name, timeouts_def.help, labels=timeouts_def.labels)
    timeouts.add_metric([queue], stream.confirm_timeouts)
    yield from (restarts, timeouts)
