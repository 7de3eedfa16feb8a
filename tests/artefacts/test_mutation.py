"""Mutation test of the promtool suite: single-token edits of the shipped rule file must fail it.

Each mutant changes one token of one alerting or baseline rule: a comparison operator, a
threshold (doubled or halved), an ``offset`` (dropped), an aggregation or ``*_over_time``
function, a set operator, or a range window (halved). For each mutant promtool runs the
generated test cases of the alerts that read the mutated rule (a baseline rule: the alerts
that read it), in parallel, on the rules cut down to what those alerts read. A mutant is killed
by its first failing case, so its cases run one at a time, the fewest evaluation steps first,
and stop there: the score is the same as running them all, at a fraction of promtool's time
(most mutants fail their first case). The harness check runs every case of every rule.

The week-old baselines are checked on recorded inputs (alerts/tests/baselines.yml: the hourly
series they read, fed directly every 30 minutes, and each baseline's value compared with a
model), and the cost alerts' comparisons on recorded rates and baselines (alerts.yml), so they
run per mutant in seconds; the fortnight scenarios of raw counters (scenarios_weekly.yml) are
left to the suite's own run. Mutants that cannot change any outcome are listed in EQUIVALENT
with the reason, left out of the score and checked to still exist. Issue 23 asks for 90 %;
MIN_SCORE is the score reached, so a weaker suite fails here; survivors are printed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "jobqueue.rules.yml"
TEST_FILES = [
    ROOT / "alerts" / "tests" / n
    for n in ("alerts.yml", "weekly.yml", "scenarios.yml", "baselines.yml")
]
MUTATED_GROUPS = ("jobqueue-exporter.alerts", "jobqueue-exporter.baselines")
# 96.1 % (269 of 280) reached; issue 23 asked for 90 %, issue 15 for 95 %.
MIN_SCORE = 0.96

# Mutants that cannot change any outcome, left out of the score: (rule, old, new, offset).
# The test below fails when one of them no longer exists, so the list follows the rules.
EQUIVALENT = {
    # count_over_time() is at least 1 wherever it has a series.
    ("JobQueueMetricsAbsent", ">", ">=", 86): "count_over_time >= 1 whenever present",
    # A sum of positive sample counts is > 0 exactly when their max is; $value is unused.
    ("JobQueueMetricsAbsent", "max without(", "sum without(", 0): "sum > 0 iff max > 0",
    # up is 0 or 1: the sum over targets is 0 exactly when the max is, and $value is 0.
    ("JobQueueExporterDown", "max without(", "sum without(", 0): "up in {0, 1}",
    # Increases are >= 0, so "> 0" and "== 0" hold for the sum over pods exactly when they
    # hold for the max; these terms are unless/and operands whose value is never shown.
    ("JobQueueNoProgress", "sum without(", "max without(", 63): "increase > 0: sum iff max",
    ("JobQueueNoProgress", "sum without(", "max without(", 173): "increase > 0: sum iff max",
    ("JobQueueProducersStopped", "sum without(", "max without(", 0): "increase == 0: sum iff max",
    # The `failed * 0` fallback of a type with no completion series is 0 however it sums.
    ("JobQueueHighFailureRatio", "sum without(", "max without(", 322): "multiplied by 0",
    ("JobQueueHighFailureRatio", "sum without(", "max without(", 659): "multiplied by 0",
    ("JobQueueWorkerCrashStorm", "sum without(", "max without(", 349): "multiplied by 0",
    # An unless operand's value is never read: only whether the series exists.
    ("JobQueueLogicalWalUnbounded", "max without(", "sum without(", 383): "unless: presence",
}

_CMP = {" > ": [" >= ", " < "], " >= ": [" > "], " == ": [" != "], " < ": [" <= "]}
_FUNCS = {
    "max_over_time(": ["min_over_time("],
    "min_over_time(": ["max_over_time("],
    "avg_over_time(": ["max_over_time("],
    "sum without(": ["max without("],
    "max without(": ["sum without("],
    "\nand\n": ["\nor\n"],
    "\nunless\n": ["\nand\n"],
}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Mutant:
    """One edit: in rule ``index`` of ``group``, text ``start..end`` replaced by ``new``."""

    group: str
    index: int
    name: str
    start: int
    end: int
    old: str
    new: str

    def describe(self) -> str:
        return f"{self.name}: {self.old.strip()!r} -> {self.new.strip()!r} at {self.start}"

    @property
    def key(self) -> tuple[str, str, str, int]:
        """The mutant as EQUIVALENT names it."""
        return (self.name, self.old.strip(), self.new.strip(), self.start)


def _duration(text: str) -> int:
    return sum(int(n) * _UNITS[u] for n, u in re.findall(r"(\d+)([smhd])", text))


def _format(seconds: int) -> str:
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            out += f"{count}{unit}"
    return out or "0s"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def mutations(expr: str) -> Iterator[tuple[int, int, str]]:
    """Every single-token edit of one expression: (start, end, replacement)."""
    for old, news in {**_CMP, **_FUNCS}.items():
        for match in re.finditer(re.escape(old), expr):
            for new in news:
                yield match.start(), match.end(), new
    for match in re.finditer(r"(?<=[<>=] )(\d+(?:\.\d+)?)\b", expr):
        value = float(match.group(1))
        for changed in (value * 2, value / 2) if value else (1.0,):
            yield match.start(), match.end(), _number(changed)
    for match in re.finditer(r" offset \w+", expr):
        yield match.start(), match.end(), ""
    for match in re.finditer(r"\[(\w+)\]", expr):
        halved = _duration(match.group(1)) // 2
        yield match.start(), match.end(), f"[{_format(halved)}]"


def _groups() -> list[dict[str, Any]]:
    return yaml.safe_load(RULES.read_text())["groups"]


def all_mutants() -> list[Mutant]:
    out = []
    for group in _groups():
        if group["name"] not in MUTATED_GROUPS:
            continue
        for index, rule in enumerate(group["rules"]):
            name = rule.get("alert") or rule["record"]
            for start, end, new in mutations(rule["expr"]):
                out.append(
                    Mutant(group["name"], index, name, start, end, rule["expr"][start:end], new)
                )
    return out


def _readers(record: str) -> set[str]:
    """Alerts whose expression reads a recorded series."""
    return {
        r["alert"] for g in _groups() for r in g["rules"] if "alert" in r and record in r["expr"]
    }


def _tests_by_alert() -> dict[str, list[dict[str, Any]]]:
    by_alert: dict[str, list[dict[str, Any]]] = {}
    for path in TEST_FILES:
        document = yaml.safe_load(path.read_text())
        for test in document["tests"]:
            names = {c["alertname"] for c in test.get("alert_rule_test", [])}
            for name in names:
                by_alert.setdefault(name, []).append(
                    {**test, "_interval": document["evaluation_interval"]}
                )
    return by_alert


def _needed(groups: list[dict[str, Any]], alerts: set[str]) -> list[dict[str, Any]]:
    """The groups cut down to ``alerts`` and the recording rules they read, transitively."""
    records = {r["record"]: r for g in groups for r in g["rules"] if "record" in r}
    keep: set[int] = set()
    todo = [r for g in groups for r in g["rules"] if r.get("alert") in alerts]
    while todo:
        rule = todo.pop()
        if id(rule) in keep:
            continue
        keep.add(id(rule))
        todo += [
            r for name, r in records.items() if re.search(rf"\b{re.escape(name)}\b", rule["expr"])
        ]
    return [{**g, "rules": [r for r in g["rules"] if id(r) in keep]} for g in groups]


def _steps(test: dict[str, Any]) -> int:
    """How many evaluations promtool makes for one case: its last eval_time over its interval."""
    times = [c["eval_time"] for c in test.get("alert_rule_test", [])]
    times += [c["eval_time"] for c in test.get("promql_expr_test", [])]
    return max((_duration(t) for t in times), default=0) // _duration(test["_interval"])


def _run_mutant(
    mutant: Mutant,
    alerts: set[str],
    tests: list[dict[str, Any]],
    workdir: Path,
    first_failure: bool = True,
) -> bool:
    """True when promtool fails a case (the mutant is killed).

    With ``first_failure`` the cases run one promtool each, cheapest first, until one fails;
    without it, all of them in one promtool (the harness check: every case must pass).
    """
    groups = _groups()
    rule = next(g for g in groups if g["name"] == mutant.group)["rules"][mutant.index]
    rule["expr"] = rule["expr"][: mutant.start] + mutant.new + rule["expr"][mutant.end :]
    # Only what the chosen tests' alerts read: the other rules cannot change their outcome.
    groups = [g for g in _needed(groups, alerts) if g["rules"]]
    directory = Path(tempfile.mkdtemp(dir=workdir))
    (directory / "rules.yml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    batches = [[t] for t in sorted(tests, key=_steps)] if first_failure else [tests]
    for batch in batches:
        files = []
        for interval in sorted({t["_interval"] for t in batch}):
            chosen = [{k: v for k, v in t.items() if k != "_interval"} for t in batch
                      if t["_interval"] == interval]  # fmt: skip
            document = {
                "rule_files": ["rules.yml"],
                "evaluation_interval": interval,
                "group_eval_order": [g["name"] for g in groups],
                "tests": chosen,
            }
            path = directory / f"tests-{len(files)}.yml"
            path.write_text(yaml.safe_dump(document, sort_keys=False))
            files.append(path.name)
        result = subprocess.run(
            [shutil.which("promtool") or "promtool", "test", "rules", *files],
            capture_output=True, text=True, timeout=900, check=False, cwd=directory,
        )  # fmt: skip
        if result.returncode != 0:
            return True
    return False


def test_mutation_operators_edit_one_token() -> None:
    edits = {new for _, _, new in mutations("max_over_time(x[5m] offset 1w) > 600\nand\ny == 0")}
    assert {"min_over_time(", "[2m30s]", "", " >= ", "1200", "300", "\nor\n", " != ", "1"} <= edits


def test_every_listed_equivalent_mutant_exists() -> None:
    keys = {m.key for m in all_mutants()}
    assert set(EQUIVALENT) <= keys, set(EQUIVALENT) - keys


@pytest.mark.slow
@pytest.mark.daemon
def test_suite_kills_single_token_mutants(tmp_path: Path) -> None:
    assert shutil.which("promtool"), "promtool is not installed"
    by_alert = _tests_by_alert()
    mutants = [m for m in all_mutants() if m.key not in EQUIVALENT]
    assert len(mutants) > 100
    jobs = []
    for mutant in mutants:
        alerts = (
            {mutant.name} if mutant.group == "jobqueue-exporter.alerts" else _readers(mutant.name)
        )
        tests = [t for a in sorted(alerts) for t in by_alert.get(a, [])]
        jobs.append((mutant, alerts, tests))
    assert all(tests for _, _, tests in jobs), [m.describe() for m, _, t in jobs if not t]
    # The harness itself: every cut-down file passes its tests without a mutation.
    unmutated = {
        (m.group, m.index): (Mutant(m.group, m.index, m.name, 0, 0, "", ""), a, t)
        for m, a, t in jobs
    }
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        broken = [
            job[0].name
            for job, failed in zip(
                unmutated.values(),
                pool.map(
                    lambda job: _run_mutant(*job, tmp_path, first_failure=False),
                    unmutated.values(),
                ),
                strict=True,
            )
            if failed
        ]
        assert not broken, f"the unmutated rules fail their own tests: {broken}"
        killed = list(pool.map(lambda job: _run_mutant(*job, tmp_path), jobs))
    survivors = [m.describe() for m, k in zip(mutants, killed, strict=True) if not k]
    score = 1 - len(survivors) / len(mutants)
    print(
        f"\nmutation score {score:.1%}: {len(mutants) - len(survivors)} of {len(mutants)} killed "
        f"({len(EQUIVALENT)} equivalent mutants left out)"
    )
    for survivor in survivors:
        print(f"  survived: {survivor}")
    assert score >= MIN_SCORE, "\n".join(survivors)
