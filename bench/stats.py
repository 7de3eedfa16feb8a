"""Summaries of timed samples: the median and percentiles every bench reports."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def median(values: Sequence[float]) -> float:
    """The median, or 0.0 for no values."""
    return statistics.median(values) if values else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (nearest rank), or 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]
