"""Decode the ``result`` jsonb of a completed job into duration and cost, and classify errors.

Rows come from users' workers: anything may be in them. A field that is missing, not a
number, negative or not finite is reported as malformed and skipped; nothing here raises.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from exporter.model import Figures
from exporter.vocabulary import COST_AI, COST_OTHER, COST_PROXY, DEADLINE, ERROR


@dataclass(frozen=True)
class ResultPaths:
    """Where in ``result`` each figure lives (configurable, defaults are the queue's)."""

    duration_ms: tuple[str, ...] = ("metrics", "duration_ms")
    ai_usd: tuple[str, ...] = ("metrics", "cost", "ai_usd")
    proxy_usd: tuple[str, ...] = ("metrics", "cost", "proxy_usd")
    total_usd: tuple[str, ...] = ("metrics", "cost", "total_usd")

    def as_tuple(self) -> tuple[tuple[str, ...], ...]:
        """The four paths in the order the change query takes them."""
        return (self.duration_ms, self.ai_usd, self.proxy_usd, self.total_usd)


@dataclass(frozen=True)
class Outcome:
    """What a completed job's result says, with the names of the fields that were malformed."""

    duration_seconds: float | None
    cost: dict[str, float]  # component (ai, proxy, other) -> USD, only components that are known
    malformed: tuple[str, ...]


FIELDS = ("duration_ms", "ai_usd", "proxy_usd", "total_usd")


def decode_result(text: str | None, paths: ResultPaths) -> Outcome:
    """Read duration and cost out of a result document; never raises."""
    try:
        document = json.loads(text) if text is not None else None
    except (ValueError, RecursionError):
        document = None
    if not isinstance(document, dict):
        return Outcome(None, {}, ("result",))
    return _outcome({name: _number_at(document, getattr(paths, name)) for name in FIELDS})


def decode_figures(figures: Figures) -> Outcome:
    """The same as decode_result, from the numbers SQL already pulled out; never raises."""
    if figures.kind != "object":
        return Outcome(None, {}, ("result",))
    return _outcome({name: _number_of(getattr(figures, name)) for name in FIELDS})


def _number_of(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)  # JSON number text: 1e400 becomes inf, rejected below
    except ValueError:
        return None
    if value >= 2**53 and not any(c in text for c in ".eE"):
        # An integer beyond float precision, rejected as decode_result does. (jsonb prints
        # 1e300 as 301 digits, so such a float is rejected too: no cost or duration is that big.)
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value


def _outcome(found: dict[str, float | None]) -> Outcome:
    malformed: list[str] = []
    values: dict[str, float] = {}
    for name in FIELDS:
        value = found[name]
        if value is None:
            malformed.append(name)
        else:
            values[name] = value
    cost: dict[str, float] = {}
    if "ai_usd" in values:
        cost[COST_AI] = values["ai_usd"]
    if "proxy_usd" in values:
        cost[COST_PROXY] = values["proxy_usd"]
    if "total_usd" in values:
        # A malformed component counts as 0 here, so sum() over components still gives the total.
        other = values["total_usd"] - cost.get(COST_AI, 0.0) - cost.get(COST_PROXY, 0.0)
        if other > 0:
            cost[COST_OTHER] = other
    duration = values["duration_ms"] / 1000.0 if "duration_ms" in values else None
    return Outcome(duration, cost, tuple(malformed))


def _number_at(document: dict[str, object], path: tuple[str, ...]) -> float | None:
    node: object = document
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    # bool is an int in Python, but true is not a cost.
    if isinstance(node, bool) or not isinstance(node, int | float):
        return None
    value = float(node) if not isinstance(node, int) or abs(node) < 2**53 else math.inf
    if not math.isfinite(value) or value < 0:
        return None
    return value


@dataclass(frozen=True)
class ErrorText:
    """A ``last_error`` split into the failure message and the reaper's appended markers."""

    base: str
    reclaims: int


def split_error(text: str | None, marker: str) -> ErrorText:
    """Peel the reaper's markers off the end of ``last_error`` (one per reclaim)."""
    if text is None:
        return ErrorText("", 0)
    reclaims = 0
    while marker and text.endswith(marker):
        text = text[: -len(marker)]
        reclaims += 1
    return ErrorText(text, reclaims)


def classify(base: str, deadline_prefix: str) -> str:
    """Reason of a failure set by the worker: deadline when the message says so, else error."""
    return DEADLINE if base.startswith(deadline_prefix) else ERROR
