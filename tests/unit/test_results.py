"""Decoding ``result`` jsonb and ``last_error``: what workers write is untrusted, nothing raises."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.counting.results import (
    ResultPaths,
    classify,
    decode_figures,
    decode_result,
    split_error,
)
from exporter.model import Figures

PATHS = ResultPaths()
MARKER = " [lease-expired reclaim]"


def result(
    duration_ms: object = 1500, ai: object = 0.25, proxy: object = 0.05, total: object = 0.5
) -> str:
    cost = {"ai_usd": ai, "proxy_usd": proxy, "total_usd": total}
    return json.dumps({"metrics": {"duration_ms": duration_ms, "cost": cost}})


def test_well_formed_result_gives_seconds_and_every_component() -> None:
    outcome = decode_result(result(), PATHS)
    assert outcome.duration_seconds == 1.5
    assert outcome.cost == pytest.approx({"ai": 0.25, "proxy": 0.05, "other": 0.2})
    assert outcome.malformed == ()
    assert sum(outcome.cost.values()) == pytest.approx(0.5)


def test_other_is_left_out_when_the_components_cover_the_total() -> None:
    outcome = decode_result(result(ai=0.3, proxy=0.2, total=0.5), PATHS)
    assert "other" not in outcome.cost
    outcome = decode_result(result(ai=0.4, proxy=0.2, total=0.5), PATHS)  # overspent parts
    assert "other" not in outcome.cost


@pytest.mark.parametrize(
    "text",
    [None, "", "not json", "[1, 2]", '"a string"', "42", "null", "[" * 100_000],
    ids=["null column", "empty", "garbage", "array", "string", "number", "json null", "deep"],
)
def test_a_result_that_is_not_an_object_is_reported_as_result(text: str | None) -> None:
    outcome = decode_result(text, PATHS)
    assert outcome == type(outcome)(None, {}, ("result",))


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (True, "a boolean is not a number"),
        ("12", "a numeric string is not a number"),
        (-1, "negative"),
        (None, "null"),
        ({"ms": 1}, "an object"),
        (10**400, "too large to be finite"),
    ],
)
def test_a_malformed_field_is_named_and_skipped_the_rest_still_counts(
    value: object, why: str
) -> None:
    del why
    outcome = decode_result(result(duration_ms=value), PATHS)
    assert outcome.duration_seconds is None
    assert outcome.malformed == ("duration_ms",)
    assert outcome.cost["ai"] == 0.25


def test_nan_and_infinity_in_json_are_malformed() -> None:
    text = '{"metrics": {"duration_ms": NaN, "cost": {"ai_usd": Infinity, "proxy_usd": 0, "total_usd": 1}}}'
    outcome = decode_result(text, PATHS)
    assert outcome.malformed == ("duration_ms", "ai_usd")
    # A malformed component counts as 0 for other, so the components still sum to the total.
    assert outcome.cost == {"proxy": 0.0, "other": 1.0}


def test_missing_paths_and_configured_paths() -> None:
    assert decode_result("{}", PATHS).malformed == (
        "duration_ms",
        "ai_usd",
        "proxy_usd",
        "total_usd",
    )
    paths = ResultPaths(("took",), ("c", "ai"), ("c", "px"), ("c", "all"))
    outcome = decode_result('{"took": 250, "c": {"ai": 1, "px": 2, "all": 3}}', paths)
    assert (outcome.duration_seconds, outcome.cost, outcome.malformed) == (
        0.25,
        {"ai": 1.0, "proxy": 2.0},
        (),
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_any_json_document_decodes_without_raising_and_costs_are_finite(document: object) -> None:
    for candidate in (document, {"metrics": document}, {"metrics": {"cost": document}}):
        outcome = decode_result(json.dumps(candidate), PATHS)
        assert all(math.isfinite(v) and v >= 0 for v in outcome.cost.values())
        if outcome.duration_seconds is not None:
            assert math.isfinite(outcome.duration_seconds)
            assert outcome.duration_seconds >= 0


def test_split_error_peels_one_marker_per_reclaim() -> None:
    assert split_error(None, MARKER) == type(split_error(None, MARKER))("", 0)
    text = split_error("boom" + MARKER + MARKER, MARKER)
    assert (text.base, text.reclaims) == ("boom", 2)
    assert split_error(MARKER + " then more", MARKER).reclaims == 0  # only at the end
    assert split_error("boom", "").reclaims == 0  # an empty marker never loops


def test_classify_by_deadline_prefix() -> None:
    assert classify("JobDeadlineExceeded: 30s", "JobDeadlineExceeded") == "deadline"
    assert classify("ValueError: JobDeadlineExceeded", "JobDeadlineExceeded") == "error"
    assert classify("", "JobDeadlineExceeded") == "error"


def figures_as_sql_pulls_them(document: object, paths: ResultPaths) -> Figures:
    """What changes_after returns: jsonb_typeof(result), and each path's value if a number."""
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    kind = kinds.get(type(document), "number")

    def at(path: tuple[str, ...]) -> str | None:
        node = document
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        if isinstance(node, bool) or not isinstance(node, int | float):
            return None
        return json.dumps(node)

    return Figures(
        kind, at(paths.duration_ms), at(paths.ai_usd), at(paths.proxy_usd), at(paths.total_usd)
    )


@given(
    st.fixed_dictionaries(
        {
            "metrics": st.fixed_dictionaries(
                {
                    "duration_ms": st.integers(-10, 2**60)
                    | st.floats(allow_nan=False)
                    | st.booleans()
                    | st.text(max_size=3),
                    "cost": st.dictionaries(
                        st.sampled_from(["ai_usd", "proxy_usd", "total_usd"]),
                        st.floats(allow_nan=False) | st.integers(-5, 2**60) | st.none(),
                    ),
                }
            )
        }
    )
    | st.lists(st.integers(), max_size=2)
    | st.none()
)
def test_numbers_pulled_out_in_sql_decode_as_the_whole_document_does(document: object) -> None:
    text = json.dumps(document) if document is not None else None
    via_sql = decode_figures(figures_as_sql_pulls_them(document, PATHS))
    assert via_sql == decode_result(text, PATHS)
