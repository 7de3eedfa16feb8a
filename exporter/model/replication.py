"""The logical counting mode's slot and stream as the leader reports them each cycle: plain data
for the metrics and the status page, no I/O (what the stream reads: model/slot_target.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# pg_replication_slots.wal_status: how safe the WAL the slot still needs is. "lost" means the
# server removed some of it: the slot is invalidated and the counts have a gap.
WAL_STATUSES = ("reserved", "extended", "unreserved", "lost")


@dataclass(frozen=True)
class StreamHealth:
    """The logical counting mode's stream on the leader: its own figures since start."""

    restarts: Mapping[str, int]  # runs that ended on an error, by reason (STREAM_RESTART_REASONS)
    confirm_timeouts: int  # /metrics responses that left before the slot was confirmed at them


@dataclass(frozen=True)
class SlotHealth:
    """The logical counting mode's replication slot, as the server reports it each cycle."""

    lag_bytes: int  # server WAL position minus the slot's confirmed position
    retained_bytes: int  # server WAL position minus the slot's restart position
    wal_status: str  # one of WAL_STATUSES
    safe_wal_bytes: int | None  # WAL that may still be written before the slot is lost;
    # None when max_slot_wal_keep_size is -1 (unbounded: the slot is never lost, the disk fills)
    gaps: int  # slots found invalidated or lost and replaced by a new baseline, since start
