"""Decode the ``result`` jsonb of a completed job into duration and cost, and classify errors.

Rows come from users' workers: anything may be in them. A figure is absent when its path is
none, when the path leads nowhere (a key missing, a value on the way that is not an object) or
to a JSON null, and when ``result`` itself is NULL: nothing is counted for it, and it is not
malformed. It is malformed when a value is there but is not a finite, non-negative number; a
``result`` that is a string, number, array or boolean (a document encoded twice looks so) is
malformed as a whole. Malformed fields are named and skipped; nothing here raises.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from exporter.model import Figures
from exporter.vocabulary import COST_AI, COST_OTHER, COST_PROXY, DEADLINE, ERROR

JsonPath = tuple[str, ...] | None  # None: the figure is not read at all


@dataclass(frozen=True)
class ResultPaths:
    """Where in ``result`` each figure lives (configurable, defaults are the queue's); None
    for a figure the queue does not store."""

    duration_ms: JsonPath = ("metrics", "duration_ms")
    ai_usd: JsonPath = ("metrics", "cost", "ai_usd")
    proxy_usd: JsonPath = ("metrics", "cost", "proxy_usd")
    total_usd: JsonPath = ("metrics", "cost", "total_usd")

    def as_tuple(self) -> tuple[JsonPath, ...]:
        """The four paths in the order the change query takes them."""
        return (self.duration_ms, self.ai_usd, self.proxy_usd, self.total_usd)

    def query_args(self) -> list[list[str] | None]:
        """The paths as the change query's $5-$8; a path that is none goes as NULL, and
        (result #> NULL) is NULL: the figure is absent."""
        return [None if path is None else list(path) for path in self.as_tuple()]

    @property
    def reads_result(self) -> bool:
        """True when any figure is read out of ``result``."""
        return any(path is not None for path in self.as_tuple())

    def cost_components(self) -> tuple[str, ...]:
        """The jobqueue_cost_usd components these paths can fill (other comes from the total)."""
        sources = (COST_AI, self.ai_usd), (COST_PROXY, self.proxy_usd), (COST_OTHER, self.total_usd)
        return tuple(component for component, path in sources if path is not None)

    def malformed_fields(self) -> tuple[str, ...]:
        """The fields that can be malformed: each one read, and ``result`` when any is."""
        read = tuple(name for name in FIELDS if getattr(self, name) is not None)
        return ("result", *read) if read else ()


class Outcome(NamedTuple):
    """What a completed job's result says, with the names of the fields that were malformed
    (a tuple: the change stream makes one per completion)."""

    duration_seconds: float | None
    cost: dict[str, float]  # component (ai, proxy, other) -> USD, only components that are known
    malformed: tuple[str, ...]


class Missing(Enum):
    """Why a figure has no value: not there at all, or there but not a usable number."""

    ABSENT = "absent"
    MALFORMED = "malformed"


# A figure read from a document: a number, or why there is none.
Figure = float | Missing

FIELDS = ("duration_ms", "ai_usd", "proxy_usd", "total_usd")
REFERENCE_PATHS = ResultPaths()
_NOTHING = Outcome(None, {}, ())


def decode_result(text: str | None, paths: ResultPaths) -> Outcome:
    """Read duration and cost out of a result document; never raises."""
    if text is None:
        return _NOTHING
    figures = _fast_figures(text, paths)
    if figures is None:
        try:
            figures = _figures(json.loads(text), paths)
        except (ValueError, RecursionError):
            return _not_an_object(paths)
    return _outcome(*figures) if figures else _not_an_object(paths)


def _fast_figures(text: str, paths: ResultPaths) -> tuple[Figure, ...] | None:
    """_figures through orjson, or None where only the standard library's reading decides."""
    if _FAST_LOADS is None:
        return None
    try:
        figures = _figures(_FAST_LOADS(text), paths)
    except ValueError:
        return None  # what orjson refuses (NaN, say), the standard library judges
    # An integer literal beyond 64 bits is a float to orjson, and an int to the standard
    # library, which _number_at refuses: a figure that large is read again. (Any smaller
    # integer is an int to both, and a float literal the same float.)
    if any(isinstance(f, float) and f >= _OVERFLOW for f in figures):
        return None
    return figures


_OVERFLOW = 2.0**63
_ABSENT_ALL = (Missing.ABSENT,) * 4


def _figures(document: object, paths: ResultPaths) -> tuple[Figure, ...]:
    """The four figures of a parsed document (all absent for a JSON null); () when it is not
    an object."""
    if document is None:
        return _ABSENT_ALL
    if not isinstance(document, dict):
        return ()
    return (
        _number_at(document, paths.duration_ms),
        _number_at(document, paths.ai_usd),
        _number_at(document, paths.proxy_usd),
        _number_at(document, paths.total_usd),
    )


def _fast_loads() -> Callable[[str], object] | None:
    """orjson's loads, when it is installed: the logical extra brings it, because the change
    stream parses every completion's result in Python (polling has SQL pull the figures out),
    and orjson does that several times faster than the standard library."""
    try:
        module = importlib.import_module("orjson")
    except ImportError:
        return None
    loads: Callable[[str], object] = module.loads
    return loads


_FAST_LOADS = _fast_loads()


def decode_figures(figures: Figures, paths: ResultPaths = REFERENCE_PATHS) -> Outcome:
    """The same as decode_result, from the values SQL already pulled out; never raises."""
    if figures.kind is None or figures.kind == "null":
        return _NOTHING
    if figures.kind != "object":
        return _not_an_object(paths)
    return _outcome(
        *(
            _number_of(getattr(figures, name))
            if getattr(paths, name) is not None
            else Missing.ABSENT
            for name in FIELDS
        )
    )


def _not_an_object(paths: ResultPaths) -> Outcome:
    return Outcome(None, {}, ("result",) if paths.reads_result else ())


# How jsonb prints a number: an optional minus, then a digit. A string arrives with its quotes,
# true, false, arrays and objects as themselves, so none of them counts, "0.5" included.
_NUMBER_START = frozenset("-0123456789")


def _number_of(text: str | None) -> Figure:
    # NULL: the path leads nowhere; "null": a JSON null stands there. Neither is a value.
    if text is None or text == "null":
        return Missing.ABSENT
    if not text or text[0] not in _NUMBER_START:
        return Missing.MALFORMED
    try:
        value = float(text)  # JSON number text: 1e400 becomes inf, rejected below
    except ValueError:
        return Missing.MALFORMED
    if value >= 2**53 and not any(c in text for c in ".eE"):
        # An integer beyond float precision, rejected as decode_result does. (jsonb prints
        # 1e300 as 301 digits, so such a float is rejected too: no cost or duration is that big.)
        return Missing.MALFORMED
    if not math.isfinite(value) or value < 0:
        return Missing.MALFORMED
    return value


def _outcome(duration_ms: Figure, ai: Figure, proxy: Figure, total: Figure) -> Outcome:
    """The outcome of the four figures (FIELDS' order), built straight: once per completion."""
    figures = (duration_ms, ai, proxy, total)
    malformed: tuple[str, ...] = ()
    if Missing.MALFORMED in figures:
        malformed = tuple(n for n, f in zip(FIELDS, figures, strict=True) if f is Missing.MALFORMED)
    cost: dict[str, float] = {}
    if type(ai) is float:
        cost[COST_AI] = ai
    if type(proxy) is float:
        cost[COST_PROXY] = proxy
    if type(total) is float:
        # A component that is malformed, absent or not read counts as 0 here, so sum() over
        # components still gives the total.
        other = total - cost.get(COST_AI, 0.0) - cost.get(COST_PROXY, 0.0)
        if other > 0:
            cost[COST_OTHER] = other
    duration = duration_ms / 1000.0 if type(duration_ms) is float else None
    return Outcome(duration, cost, malformed)


def _number_at(document: dict[str, object], path: JsonPath) -> Figure:
    if path is None:
        return Missing.ABSENT
    node: Any = document
    try:
        for key in path:
            node = node[key]
    except (KeyError, TypeError):  # a key missing, or a value on the way that is no object
        return Missing.ABSENT
    kind = type(node)  # bool is an int in Python, but true is not a cost
    value: float
    if kind is float:
        value = node
    elif kind is int:
        value = float(node) if abs(node) < 2**53 else math.inf
    elif node is None:
        return Missing.ABSENT
    else:
        return Missing.MALFORMED
    if not math.isfinite(value) or value < 0:
        return Missing.MALFORMED
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
