"""Alerts on the logical counting mode's replication slot (collect.counting: logical).

A slot keeps WAL until the exporter confirms it, so the risks are the database's, not the
queue's: lag that keeps growing (the exporter falls behind, or nothing lets it confirm), WAL
retained close to max_slot_wal_keep_size (the server is about to invalidate the slot), and a
gap (it did, or the slot was lost on failover: transitions are missing from every counter).
The series exist only for queues in logical mode, so the rules are silent everywhere else.
"""

from __future__ import annotations

from typing import Any

from exporter.rules.promql import DEDUP, JOB, QUEUE, VALUE_COUNT, VALUE_RATIO, Builder
from exporter.rules.promql import format_duration as d
from exporter.settings import AlertSettings

VALUE_BYTES = "{{ $value | humanize1024 }}"
# A consumer that confirms at each scrape is a few MiB behind on a busy queue; 256 MiB that still
# grows after 15m means it stopped keeping up (or stopped confirming), not a burst.
LAG_BYTES = 256 * 1024 * 1024
LAG_WINDOW = 900.0
LAG_FOR = 900.0
# The share of the WAL the server allows the slot (retained + safe_wal_size) that it holds:
# past it a burst of writes or a checkpoint invalidates the slot.
NEAR_CAP_RATIO = 0.8
NEAR_CAP_FOR = 300.0
# A gap is a fact, not a trend: it alerts within a minute (the for: that every shipped alert
# has) and stays an hour so that it is seen.
GAP_WINDOW = 3600.0
GAP_FOR = 60.0


def logical_alert_specs(alerts: AlertSettings) -> list[dict[str, Any]]:
    """The slot alerts as keyword arguments of alerting._alert."""
    b = Builder(alerts)
    lag = b.sel("jobqueue_exporter_logical_lag_bytes")
    retained = b.sel("jobqueue_exporter_logical_retained_bytes")
    safe = b.sel("jobqueue_exporter_logical_safe_wal_bytes")
    gaps = b.sel("jobqueue_exporter_logical_gaps_total")
    window = d(GAP_WINDOW)
    return [
        {
            "name": "JobQueueLogicalLagGrowing",
            "expr": f"{DEDUP} ({lag}) > {LAG_BYTES}\n"
            f"and\n{DEDUP} (deriv({lag}[{d(LAG_WINDOW)}])) > 0",
            "for_": LAG_FOR,
            "severity": "warning",
            "summary": "The exporter's replication slot falls further behind the database's WAL.",
            "description": f"The slot of queue {QUEUE} in {JOB} is {VALUE_BYTES}B behind the "
            f"server's WAL and has kept growing for {d(LAG_FOR)}: the server keeps that WAL on "
            "disk, and the transition counters are late by as much. Is the exporter streaming "
            "(jobqueue_exporter_leader), and is it scraped?",
        },
        {
            "name": "JobQueueLogicalWalNearCap",
            "expr": f"{DEDUP} (\n  {retained}\n  /\n  ({retained} + {safe})\n) > {NEAR_CAP_RATIO}",
            "for_": NEAR_CAP_FOR,
            "severity": "warning",
            "summary": "The exporter's replication slot holds WAL close to the server's cap.",
            "description": f"The slot of queue {QUEUE} in {JOB} holds {VALUE_RATIO} of the WAL "
            "max_slot_wal_keep_size allows it; past the cap the server invalidates the slot and "
            "the counters lose the transitions until the exporter takes a new baseline.",
        },
        {
            "name": "JobQueueLogicalGap",
            # increase() sees a gap counted by a running exporter; the second half sees the one
            # a pod reports in its first scrape (a slot lost while the exporter was stopped).
            "expr": f"{b.total(f'increase({gaps}[{window}])')} > 0\n"
            f"or\n{DEDUP} ({gaps} > 0 unless {gaps} offset {window})",
            "for_": GAP_FOR,
            "severity": "warning",
            "summary": "The exporter lost its replication slot: the counters miss transitions.",
            "description": f"Queue {QUEUE} in {JOB} counted {VALUE_COUNT} gap(s) in the last "
            f"{window}: its slot was invalidated or lost (max_slot_wal_keep_size, failover), "
            "and the transitions between the old slot's last change and the new baseline are in "
            "no counter. Gauges are unaffected.",
        },
    ]
