"""Last row: the replication slot of queues counted from the WAL (collect.counting: logical).

Empty for queues that poll: the slot series exist only where a queue streams, on its leader.
"""

from __future__ import annotations

from dashboards.grafana import Json, Look, runbook, stat, steps, target, timeseries
from dashboards.queries import E, sum_by


def slot_row() -> list[Json]:
    """The slot's WAL (behind, retained) per queue, and the gaps of the last hour."""
    return [
        timeseries(
            "Replication slot WAL",
            "Per logical queue: bytes of WAL the slot is behind the server (changes not yet "
            "decoded or not yet carried by a scrape) and bytes the server keeps on disk for it. "
            "Lag that keeps growing means the exporter falls behind or is not scraped; retained "
            "WAL near max_slot_wal_keep_size means the slot is about to be invalidated, and "
            "retained WAL that keeps growing without that cap fills the primary's disk.",
            "bytes",
            [
                target(f"jobqueue_exporter_logical_lag_bytes{{{E}}}", "behind {{queue}}"),
                target(f"jobqueue_exporter_logical_retained_bytes{{{E}}}", "retained {{queue}}"),
            ],
            Look(
                width=16,
                links=runbook(
                    "JobQueueLogicalLagGrowing",
                    "JobQueueLogicalWalNearCap",
                    "JobQueueLogicalWalUnbounded",
                ),
            ),
        ),
        stat(
            "Slot gaps (1h)",
            "Times in the last hour a queue's slot was found invalidated or lost and counting "
            "went on from a new one: the transitions in between are in no counter. Should be 0.",
            "short",
            [target(sum_by("", f"increase(jobqueue_exporter_logical_gaps_total{{{E}}}[1h])"))],
            Look(
                width=8,
                thresholds=steps(("green", None), ("orange", 1)),
                no_value="0",
                links=runbook("JobQueueLogicalGap"),
            ),
        ),
    ]
