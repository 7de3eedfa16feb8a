"""Ground truth: the exporter's tallies compared, exactly, with the fleet's own record."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any

from exporter.demo.fleet import Tally
from exporter.demo.queue import JobQueue
from exporter.poller import Poller
from tests.conftest import fetch

DEAD_COUNT = "SELECT job_type, count(*) AS n FROM job WHERE status = 4 GROUP BY 1"


def expected(truth: Tally, poller: Poller) -> dict[str, object]:
    """The ground truth folded onto the exporter's own labels."""
    label = poller.labels.label
    out: dict[str, object] = {}
    out["enqueued"] = _fold(truth.enqueued, label)
    out["completed"] = _fold(truth.completed, label)
    out["requeued"] = _fold(truth.requeued, label)
    failures: Counter[tuple[str, str]] = Counter()
    for (jt, reason), n in truth.failures.items():
        failures[(label(jt), reason)] += n  # several job types fold into "other": add up
    dead: Counter[tuple[str, str]] = Counter()
    for (jt, reason), n in truth.dead.items():
        dead[(label(jt), reason)] += n
    out["failures"] = failures
    out["dead"] = dead
    cost: defaultdict[tuple[str, str], float] = defaultdict(float)
    for (jt, component), usd in truth.cost.items():
        cost[(label(jt), component)] += usd
    out["cost"] = dict(cost)
    return out


def _fold(counter: Counter[Any], label: object) -> Counter[str]:
    out: Counter[str] = Counter()
    for jt, n in counter.items():
        out[label(jt)] += n  # type: ignore[operator]
    return out


def assert_exact(poller: Poller, truth: Tally) -> None:
    tallies = poller.tallies
    exp = expected(truth, poller)
    assert +tallies.enqueued == +exp["enqueued"]  # type: ignore[operator]
    assert +tallies.completed == +exp["completed"]  # type: ignore[operator]
    assert +tallies.requeued == +exp["requeued"]  # type: ignore[operator]
    assert +tallies.dead == +exp["dead"]  # type: ignore[operator]
    assert +tallies.failures == +exp["failures"]  # type: ignore[operator]
    assert +tallies.malformed == +truth.malformed
    exp_cost: dict[tuple[str, str], float] = exp["cost"]  # type: ignore[assignment]
    got_cost = {k: v for k, v in tallies.cost.items() if v}
    assert set(got_cost) == {k for k, v in exp_cost.items() if v}
    for key, usd in exp_cost.items():
        assert math.isclose(got_cost.get(key, 0.0), usd, abs_tol=1e-9), key
    label = poller.labels.label
    for name, table, samples in (
        ("duration", tallies.duration, truth.duration_seconds),
        ("wait", tallies.wait, truth.wait_seconds),
        ("latency", tallies.latency, truth.latency_seconds),
    ):
        by_label: defaultdict[str, list[float]] = defaultdict(list)
        for jt, values in samples.items():
            by_label[label(jt)].extend(values)
        assert {k for k, v in table.items() if v.count} == {k for k, v in by_label.items() if v}, (
            name
        )
        for lab, values in by_label.items():
            histogram = table[lab]
            assert histogram.count == len(values), (name, lab)
            assert math.isclose(histogram.total, math.fsum(values), abs_tol=1e-9), (name, lab)
            for (le, cumulative), bound in zip(
                histogram.cumulative(), histogram.bounds, strict=False
            ):
                assert cumulative == sum(1 for v in values if v <= bound), (name, lab, le)


async def assert_dead_gauge_matches_table(
    poller: Poller, dsn: str, queue: type[JobQueue] = JobQueue
) -> None:
    """The dead-letter gauge, kept from transitions between recounts, equals the table."""
    rows = await fetch(dsn, getattr(queue, "DEAD_COUNT", DEAD_COUNT))
    assert poller.snapshot is not None
    assert {k: v for k, v in (poller.snapshot.dead or {}).items() if v} == {
        r["job_type"]: r["n"] for r in rows
    }
