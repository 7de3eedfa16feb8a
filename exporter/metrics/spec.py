"""What one exported metric is: its name, type, labels, help text and source.

definitions.py and slot.py list the metrics; the README's table, the rules, the dashboard and the
tests read those lists, so a name is spelled once.
"""

from __future__ import annotations

from dataclasses import dataclass

# Every series but build_info carries the queue it describes, so several queues under one
# Prometheus job (or one exporter process) never merge.
QUEUE = "queue"

EVERY = "Collected every interval in the background, not on scrape."


@dataclass(frozen=True)
class MetricDefinition:
    """One exported metric: its name (without _total), type, labels and help text."""

    name: str
    type: str  # gauge | counter | histogram | info
    labels: tuple[str, ...]
    help: str
    source: str  # where the number comes from, for the README's metric reference

    @property
    def exposed_names(self) -> tuple[str, ...]:
        """Series names as they appear in the text exposition."""
        if self.type == "counter":
            return (self.name + "_total",)
        if self.type == "histogram":
            return (self.name + "_bucket", self.name + "_sum", self.name + "_count")
        return (self.name,)


def define(
    name: str, type_: str, labels: tuple[str, ...], help_: str, source: str
) -> MetricDefinition:
    return MetricDefinition(name, type_, labels, help_, source)
