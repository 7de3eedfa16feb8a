"""Ground truth of a simulated fleet: every committed transition, tallied as the exporter should.

Results are read the way the exporter reads them (see :func:`result_fields`), so a test can
compare the exporter's counters with these numbers exactly.
"""

from __future__ import annotations

import math
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from exporter.demo.queue import DEAD, Transition
from exporter.model import JobType
from exporter.vocabulary import (
    COST_AI,
    COST_OTHER,
    COST_PROXY,
    DEADLINE,
    DEADLINE_PREFIX,
    ERROR,
    LEASE_EXPIRED,
)

_COST_FIELDS = {COST_AI: "ai_usd", COST_PROXY: "proxy_usd", "total": "total_usd"}


def failure_reason(transition: Transition) -> str:
    """The exporter's reason of a failed attempt: deadline, lease_expired or error."""
    if transition.kind == "reap":
        return LEASE_EXPIRED
    if (transition.last_error or "").startswith(DEADLINE_PREFIX):
        return DEADLINE
    return ERROR


def _number(value: Any) -> float | None:
    """A usable metric value: a finite, non-negative JSON number (bools are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return float(value)


def result_fields(result: Any) -> tuple[dict[str, float], set[str]]:
    """Split a result jsonb into usable fields and malformed ones, the way the exporter reads it.

    Usable keys: duration_ms, ai_usd, proxy_usd, total_usd. A missing key or a JSON null is
    absent (neither usable nor malformed), and so is a NULL result; a result that is not an
    object is malformed as a whole (field ``result``) and yields nothing else.
    """
    if result is None:
        return {}, set()
    if not isinstance(result, dict):
        return {}, {"result"}
    metrics = result.get("metrics")
    metrics = metrics if isinstance(metrics, dict) else {}
    cost = metrics.get("cost")
    cost = cost if isinstance(cost, dict) else {}
    raw = {"duration_ms": metrics.get("duration_ms")}
    raw.update({name: cost.get(name) for name in _COST_FIELDS.values()})
    good: dict[str, float] = {}
    bad: set[str] = set()
    for name, value in raw.items():
        if value is None:
            continue
        number = _number(value)
        if number is None:
            bad.add(name)
        else:
            good[name] = number
    return good, bad


def cost_components(fields: dict[str, float]) -> dict[str, float]:
    """Cost by component; other = total - ai - proxy (missing parts count 0) when positive."""
    out = {c: fields[f] for c, f in _COST_FIELDS.items() if c != "total" and f in fields}
    if "total_usd" in fields:
        other = fields["total_usd"] - out.get(COST_AI, 0.0) - out.get(COST_PROXY, 0.0)
        if other > 0:
            out[COST_OTHER] = other
    return out


@dataclass
class Tally:
    """Ground truth of every transition the fleet (and its hazard helpers) committed.

    With ``detailed=False`` (the long-running demo) only the counters and costs are kept,
    not the transition log and the samples, so memory stays flat; :meth:`since` then fails.
    """

    detailed: bool = True
    transitions: list[Transition] = field(default_factory=list)
    enqueued: Counter[JobType] = field(default_factory=Counter)
    duplicates: Counter[JobType] = field(default_factory=Counter)  # skipped by dedupe: not enqueues
    claimed: Counter[JobType] = field(default_factory=Counter)
    completed: Counter[JobType] = field(default_factory=Counter)
    failures: Counter[tuple[JobType, str]] = field(default_factory=Counter)
    dead: Counter[tuple[JobType, str]] = field(default_factory=Counter)
    requeued: Counter[JobType] = field(default_factory=Counter)
    cost: defaultdict[tuple[JobType, str], float] = field(
        default_factory=lambda: defaultdict(float)
    )
    malformed: Counter[str] = field(default_factory=Counter)
    duration_seconds: defaultdict[JobType, list[float]] = field(
        default_factory=lambda: defaultdict(list)
    )
    wait_seconds: defaultdict[JobType, list[float]] = field(
        default_factory=lambda: defaultdict(list)
    )
    latency_seconds: defaultdict[JobType, list[float]] = field(
        default_factory=lambda: defaultdict(list)
    )

    @classmethod
    def from_transitions(cls, transitions: Iterable[Transition]) -> Tally:
        """Rebuild a tally from a list of transitions."""
        tally = cls()
        for transition in transitions:
            tally.record(transition)
        return tally

    def record(self, t: Transition) -> None:
        """Account for one committed transition."""
        if self.detailed:
            self.transitions.append(t)
        jt = t.job_type
        if t.kind == "enqueue":
            self.enqueued[jt] += 1
        elif t.kind == "claim":
            self.claimed[jt] += 1
        elif t.kind == "requeue":
            self.requeued[jt] += 1
        elif t.kind in ("fail", "reap"):
            reason = failure_reason(t)
            self.failures[jt, reason] += 1
            if t.status == DEAD:
                self.dead[jt, reason] += 1
        elif t.kind == "complete":
            self.completed[jt] += 1
            good, bad = result_fields(t.result)
            self.malformed.update(bad)
            for component, usd in cost_components(good).items():
                self.cost[jt, component] += usd
            if not self.detailed:
                return
            if "duration_ms" in good:
                self.duration_seconds[jt].append(good["duration_ms"] / 1000)
            elif t.run_started_at is not None:
                # Without a usable duration_ms the exporter takes the row's run time.
                ran = (t.updated_at - t.run_started_at).total_seconds()
                self.duration_seconds[jt].append(max(0.0, ran))
            if t.run_started_at is not None:
                self.wait_seconds[jt].append((t.run_started_at - t.run_after).total_seconds())
            self.latency_seconds[jt].append((t.updated_at - t.created_at).total_seconds())

    def snapshot(self) -> Tally:
        """An independent copy, to compare with later (see :meth:`since`)."""
        copy = Tally.from_transitions(self.transitions)
        copy.duplicates = Counter(self.duplicates)
        return copy

    def since(self, earlier: Tally) -> Tally:
        """The transitions recorded after ``earlier`` was snapshotted from this tally."""
        if not (self.detailed and earlier.detailed):
            raise ValueError("since() needs detailed tallies")
        later = Tally.from_transitions(self.transitions[len(earlier.transitions) :])
        later.duplicates = self.duplicates - earlier.duplicates
        return later

    def last_by_job(self) -> dict[uuid.UUID, Transition]:
        """The latest transition of each job: what its row must look like now."""
        return {t.job_id: t for t in self.transitions}
