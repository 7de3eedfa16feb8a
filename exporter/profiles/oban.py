"""The Oban preset (Oban Python 0.7, Elixir Oban 2.x): a profile of the in-place state diff.

Oban keeps no event log: a job is one row of ``oban_jobs`` whose state, ``attempt``,
``errors`` and ``meta`` change in place, which :mod:`exporter.counting.statediff` counts given
Oban's state names. profiles/sql/oban.sql reads the row versions written since the previous
snapshot within five index ranges (the active set, three terminal-state windows, the ids above
a settled watermark). docs/presets.md ("Oban") has the argument.
"""

from __future__ import annotations

from exporter.counting.state_change import RowState, StateNames
from exporter.counting.statediff import StateDiffReader
from exporter.profiles.base import EXACT_GAUGES, Exactness, RetentionHint, preset_queries

__all__ = ["INSERTED", "ObanReader", "RowState", "change"]

PRESET = "oban"
# Oban Python's Lifeline default (rescue_after); Elixir Oban's is 60 min: pass yours.
RESCUE_AFTER = 300.0
# Elixir Oban's Pruner default max_age: the shorter of the two libraries' (Python: 1 day).
PRUNER_MAX_AGE = 60.0
STATES = StateNames(
    enum="oban_job_state",
    waiting=frozenset({"available", "scheduled", "suspended", "retryable"}),
    running="executing",
    completed="completed",
    cancelled="cancelled",
    discarded="discarded",
    optional=frozenset({"suspended"}),  # Oban Pro's workflows: older schemas' enum lacks it
)
# meta.rescued counts the Lifeline's rescues; a Lifeline discard leaves no error entry.
change = STATES.change
INSERTED = RowState(STATES.inserted)  # a job the reader has not seen

CAPABILITIES: dict[str, Exactness] = {
    **EXACT_GAUGES,
    "held": "not exported",  # discarded rows are history, kept until the Pruner runs
    "enqueued": "exact",
    "completed": "exact",
    "failures": "exact",
    "failure_reason": "exact",  # lease_expired (Lifeline rescue), deadline (timeout), error
    "failure_deadline": "exact",
    "dead": "exact",
    "requeued": "exact",
    "cancelled": "exact",
    "wait": "exact",  # of the last attempt: scheduled_at -> attempted_at
    "duration": "exact",  # of the last attempt: attempted_at -> completed_at
    "latency": "exact",
}

RETENTION = RetentionHint(
    rows_deleted_on_success=False,
    history_kept=(
        "completed, discarded and cancelled jobs until the Pruner deletes them: max_age after "
        "they end, 60 s by default in Elixir Oban, 1 day in Oban Python"
    ),
    warning=(
        "a job that ends and is pruned between two cycles is never counted: keep the "
        "collection interval at most half of the Pruner's max_age"
    ),
    seconds=PRUNER_MAX_AGE,
)


class ObanReader(StateDiffReader):
    """Reads oban_jobs into gauges and exact counts, one cycle at a time."""

    preset = PRESET
    library = "Oban"
    event_log = "oban_jobs"  # not a log: the table whose ids the horizon's watermark reads
    states = STATES
    default_stuck_after = RESCUE_AFTER

    def statements(self) -> dict[str, str]:
        """profiles/sql/oban.sql, with the id horizon over oban_jobs."""
        return preset_queries(PRESET, event_log=self.event_log)

    @property
    def rescue_after(self) -> float | None:
        """The Lifeline's rescue_after: the stuck test."""
        return self.stuck_after
