"""Alerts on the logical counting mode's replication slot (collect.counting: logical).

A slot keeps WAL until the exporter confirms it, so the risks are the database's, not the
queue's: lag that keeps growing (the exporter falls behind, or nothing lets it confirm), WAL
retained close to max_slot_wal_keep_size (the server is about to invalidate the slot), WAL that
keeps growing where no cap stops it (a page: the primary's disk), and a gap (it did, or the
slot was lost on failover: transitions are missing from every counter).
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
# With collect.logical_allow_unbounded_wal nothing caps the slot, and JobQueueLogicalWalNearCap
# has no cap to compare with (no safe_wal_size series). Retained WAL saws up and down while the
# slot is confirmed (restart_lsn moves at the server's running-xacts records and checkpoints),
# so "keeps growing" is the lowest point of the last quarter hour above the highest point of
# the quarter hour that ended 45m before (half an hour apart), by more than 32 MiB: growth
# faster than 64 MiB an hour, 1.5 GiB a day. Held for a quarter hour more, that is an hour of
# growth. A slot past 1 GiB that grows so fills a disk in hours to days, whoever is asleep.
UNBOUNDED_BYTES = 1024 * 1024 * 1024
UNBOUNDED_GROWTH = 32 * 1024 * 1024
UNBOUNDED_STEP = 900.0
UNBOUNDED_FOR = 900.0
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
    window, step = d(GAP_WINDOW), d(UNBOUNDED_STEP)
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
            "name": "JobQueueLogicalWalUnbounded",
            "expr": f"(\n  {DEDUP} (min_over_time({retained}[{step}]))\n"
            f"  -\n  {DEDUP} (max_over_time({retained}[{step}] offset "
            f"{d(3 * UNBOUNDED_STEP)}))\n) > {UNBOUNDED_GROWTH}\n"
            f"and\n{DEDUP} ({retained}) > {UNBOUNDED_BYTES}\n"
            f"unless\n{DEDUP} ({safe})",
            "for_": UNBOUNDED_FOR,
            "severity": "critical",
            "summary": "A replication slot without a WAL cap has kept growing for an hour.",
            "description": f"The WAL the server keeps for the slot of queue {QUEUE} in {JOB} "
            f"grew by at least {VALUE_BYTES}B within the last hour, past 1 GiB, and "
            "max_slot_wal_keep_size "
            "is -1 (collect.logical_allow_unbounded_wal): nothing stops it before the "
            "primary's disk is full. Is the exporter streaming and confirming, or does a long "
            "transaction hold the slot back?",
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
