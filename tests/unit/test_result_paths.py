"""Result paths that are none: how they are written, what the queue then exports, and where the
run time comes from when ``result`` holds none (no database)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from exporter.counting.results import ResultPaths
from exporter.counting.tracker import Tracker, TrackerOptions
from exporter.model import DONE, RUNNING, Coverage, JobRow, JobTypeLabels, Tallies
from exporter.profiles import profile_of
from exporter.settings import ConfigError, QueueSettings, load_settings
from exporter.vocabulary import COST_COMPONENTS, MALFORMED_FIELDS

PATHS = ("duration_path", "cost_ai_path", "cost_proxy_path", "cost_total_path")


def loaded(tmp_path: Path, text: str = "", **sources: dict[str, str]) -> QueueSettings:
    path = tmp_path / "config.yml"
    path.write_text(text)
    settings = load_settings(str(path), sources.get("environ", {}), sources.get("flags", {}))
    return settings.queues[0]


def test_null_in_yaml_an_empty_flag_and_an_empty_variable_each_mean_none(tmp_path: Path) -> None:
    queue = loaded(
        tmp_path,
        "collect:\n  duration_path: null\n  cost_ai_path: ~\n",
        environ={"JOBQUEUE_EXPORTER_COLLECT_COST_PROXY_PATH": ""},
        flags={"collect.cost-total-path": ""},
    )
    assert [getattr(queue.collect, name) for name in PATHS] == [None] * 4
    # The defaults are the reference queue's paths.
    defaults = loaded(tmp_path)
    assert defaults.collect.cost_ai_path == ("metrics", "cost", "ai_usd")
    assert defaults.collect.duration_path == ("metrics", "duration_ms")


@pytest.mark.parametrize(
    ("text", "flags", "message"),
    [
        ("collect:\n  cost_ai_path: ''\n", {}, "collect.cost_ai_path: must name at least one key"),
        ("collect:\n  cost_ai_path: []\n", {}, "(null: the figure is not read)"),
        ("", {"collect.cost-ai-path": "metrics..ai"}, "non-empty string, got '' in 'metrics..ai'"),
        ("", {"collect.duration-path": "."}, "collect.duration_path: every key must be"),
        ("collect:\n  duration_path: {a: 1}\n", {}, "expected a list of keys or a dotted path"),
    ],
)
def test_a_path_that_names_no_key_is_still_an_error(
    tmp_path: Path, text: str, flags: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        loaded(tmp_path, text, flags=flags)
    assert message in str(info.value)


def coverage(queue: QueueSettings) -> Coverage:
    return profile_of(queue).coverage_for(queue)


def test_the_default_paths_export_every_cost_component_and_malformed_field(
    tmp_path: Path,
) -> None:
    queue = loaded(tmp_path)
    got = coverage(queue)
    assert (got.cost_components, got.malformed_fields) == (COST_COMPONENTS, MALFORMED_FIELDS)
    assert {"cost", "malformed"}.isdisjoint(got.withheld)


def test_a_path_that_is_none_takes_its_series_away(tmp_path: Path) -> None:
    queue = loaded(tmp_path, "collect:\n  cost_ai_path: null\n  cost_total_path: null\n")
    got = coverage(queue)
    assert got.cost_components == ("proxy",)
    assert got.malformed_fields == ("result", "duration_ms", "proxy_usd")
    assert {"cost", "malformed"}.isdisjoint(got.withheld)


def test_with_every_path_none_there_is_no_cost_and_no_malformed_family(tmp_path: Path) -> None:
    text = "collect:\n" + "".join(f"  {name}: null\n" for name in PATHS)
    got = coverage(loaded(tmp_path, text))
    assert (got.cost_components, got.malformed_fields) == ((), ())
    assert {"cost", "malformed", "cancelled"} <= got.withheld
    # The duration histogram stays: it comes from the row then.
    assert "duration" not in got.withheld


def test_a_preset_keeps_its_own_coverage_whatever_the_paths(tmp_path: Path) -> None:
    queue = loaded(tmp_path, "queue:\n  profile: procrastinate\ncollect:\n  cost_ai_path: null\n")
    preset = profile_of(queue)
    assert coverage(queue) is preset.coverage
    assert "cost" in preset.coverage.withheld


def tracker(paths: ResultPaths) -> Tracker:
    tallies = Tallies((1.0, 10.0), (1.0, 10.0), (1.0, 10.0))
    return Tracker(
        TrackerOptions(commit_lag_tolerance=30.0, paths=paths), JobTypeLabels({}, 50), tallies
    )


def complete(t: Tracker, *results: str | None) -> None:
    running = JobRow(
        job_id="a", job_type=1, status=RUNNING, attempts=1, max_attempts=3, last_error=None,
        result=None, run_after=1000.0, run_started_at=1001.0, created_at=1000.0,
        updated_at=1001.0,
    )  # fmt: skip
    t.baseline(1002.0, [replace(running, job_id=str(i)) for i in range(len(results))], [])
    done = [
        replace(running, job_id=str(i), status=DONE, result=text, updated_at=1003.5 + i)
        for i, text in enumerate(results)
    ]
    t.apply(1010.0, done)


def test_without_a_run_time_in_result_the_row_gives_it() -> None:
    t = tracker(ResultPaths())
    # Absent (NULL, no key), malformed (a string), and present: 2.5 s, 3.5 s, 4.5 s, 1.5 s.
    complete(t, None, '{"outcome": "ok"}', '{"metrics": {"duration_ms": "9"}}',
             '{"metrics": {"duration_ms": 1500}}')  # fmt: skip
    histogram = t.tallies.duration["1"]
    assert (histogram.count, histogram.total) == (4, 2.5 + 3.5 + 4.5 + 1.5)
    assert +t.tallies.malformed == {"duration_ms": 1}
    assert sum(t.tallies.cost.values()) == 0


def test_a_duration_path_that_is_none_always_takes_the_row() -> None:
    t = tracker(ResultPaths(duration_ms=None))
    complete(t, '{"metrics": {"duration_ms": 1500, "cost": {"ai_usd": 0.5}}}')
    histogram = t.tallies.duration["1"]
    assert (histogram.count, histogram.total) == (1, 2.5)
    assert t.tallies.cost[("1", "ai")] == 0.5


def test_a_completion_that_never_started_has_no_run_time() -> None:
    t = tracker(ResultPaths())
    t.baseline(1002.0, [], [])
    never = JobRow(
        job_id="n", job_type=1, status=DONE, attempts=0, max_attempts=3, last_error=None,
        result=None, run_after=1000.0, run_started_at=None, created_at=1000.0, updated_at=1003.0,
    )  # fmt: skip
    t.apply(1010.0, [never])
    assert t.tallies.completed["1"] == 1
    assert "1" not in t.tallies.duration or t.tallies.duration["1"].count == 0
