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
    ["", "not json", "[1, 2]", '"a string"', "42", "true", "[" * 100_000],
    ids=["empty", "garbage", "array", "string", "number", "boolean", "deep"],
)
def test_a_result_that_is_not_an_object_is_reported_as_result(text: str) -> None:
    outcome = decode_result(text, PATHS)
    assert outcome == type(outcome)(None, {}, ("result",))


def test_a_document_encoded_twice_is_malformed_as_a_whole() -> None:
    # json.dumps applied twice stores a string: the costs are there, but no path reaches them.
    assert decode_result(result(), PATHS).malformed == ()
    outcome = decode_result(json.dumps(result()), PATHS)
    assert outcome == type(outcome)(None, {}, ("result",))


@pytest.mark.parametrize("text", [None, "null"], ids=["null column", "json null"])
def test_a_null_result_is_absent_for_every_field_not_malformed(text: str | None) -> None:
    assert decode_result(text, PATHS) == type(decode_result(text, PATHS))(None, {}, ())
    kind = None if text is None else "null"
    assert decode_figures(Figures(kind), PATHS) == decode_result(text, PATHS)


@pytest.mark.parametrize(
    "document",
    [{}, {"outcome": "ok"}, {"metrics": {}}, {"metrics": "fast"}, {"metrics": {"cost": [1]}},
     {"metrics": {"duration_ms": None, "cost": {"ai_usd": None}}}],
    ids=["empty", "other keys", "no cost", "not an object on the way", "array on the way",
         "json nulls"],
)  # fmt: skip
def test_a_missing_key_is_absent_not_malformed(document: object) -> None:
    outcome = decode_result(json.dumps(document), PATHS)
    assert (outcome.duration_seconds, outcome.cost, outcome.malformed) == (None, {}, ())
    assert decode_figures(figures_as_sql_pulls_them(document, PATHS), PATHS) == outcome


def test_a_path_that_is_none_is_never_read_nor_malformed() -> None:
    text = result(duration_ms="slow", ai="x", proxy=-1, total=0.5)
    assert set(decode_result(text, PATHS).malformed) == {"duration_ms", "ai_usd", "proxy_usd"}
    paths = ResultPaths(None, None, None, ("metrics", "cost", "total_usd"))
    outcome = decode_result(text, paths)
    # Without ai and proxy, other is the whole total: sum() is still the total.
    assert (outcome.duration_seconds, outcome.cost, outcome.malformed) == (None, {"other": 0.5}, ())
    figures = figures_as_sql_pulls_them(json.loads(text), PATHS)  # SQL would send NULL paths
    assert decode_figures(figures, paths) == outcome
    nothing = ResultPaths(None, None, None, None)
    assert decode_result('"a string"', nothing).malformed == ()
    assert decode_figures(Figures("array"), nothing).malformed == ()
    assert (nothing.cost_components(), nothing.malformed_fields()) == ((), ())
    assert (paths.cost_components(), paths.malformed_fields()) == (
        ("other",),
        ("result", "total_usd"),
    )
    assert PATHS.cost_components() == ("ai", "proxy", "other")
    assert PATHS.query_args()[0] == ["metrics", "duration_ms"]
    assert nothing.query_args() == [None, None, None, None]


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (True, "a boolean is not a number"),
        ("12", "a numeric string is not a number"),
        (-1, "negative"),
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
    assert decode_result("{}", PATHS).malformed == ()
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
    """What changes_after returns: jsonb_typeof(result), and each path's value as JSON text."""
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    kind = kinds.get(type(document), "number")

    def at(path: tuple[str, ...]) -> str | None:
        node = document
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return None  # (result #> path) is NULL: a key missing, or not an object there
            node = node[key]
        return json.dumps(node)  # ::text of any value: a string with its quotes, null as null

    return Figures(
        kind, at(paths.duration_ms), at(paths.ai_usd), at(paths.proxy_usd), at(paths.total_usd)
    )


# Any JSON value; strings that read as numbers must still not count as numbers.
SCALARS = (
    st.integers(-10, 2**60)
    | st.floats(allow_nan=False)
    | st.booleans()
    | st.none()
    | st.text(max_size=3)
    | st.sampled_from(["0.5", "-1", "1e3", "12", " 7", "Infinity", "NaN", ""])
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=2)
        | st.dictionaries(st.sampled_from(["ai_usd", "cost", "x"]), inner, max_size=2)
    ),
    max_leaves=4,
)
COSTS = st.dictionaries(st.sampled_from(["ai_usd", "proxy_usd", "total_usd", "other"]), VALUES)


@given(
    st.fixed_dictionaries(
        {"metrics": st.fixed_dictionaries({"duration_ms": VALUES, "cost": COSTS | VALUES})}
    )
    | st.fixed_dictionaries({"metrics": VALUES})
    | st.lists(st.integers(), max_size=2)
    | VALUES
)
def test_values_pulled_out_in_sql_decode_as_the_whole_document_does(document: object) -> None:
    text = json.dumps(document)
    via_sql = decode_figures(figures_as_sql_pulls_them(document, PATHS))
    assert via_sql == decode_result(text, PATHS)


def test_a_string_holding_a_number_is_malformed_either_way() -> None:
    document = {"metrics": {"duration_ms": "1500", "cost": {"ai_usd": "0.5", "total_usd": 1}}}
    via_sql = decode_figures(figures_as_sql_pulls_them(document, PATHS))
    assert via_sql == decode_result(json.dumps(document), PATHS)
    assert set(via_sql.malformed) == {"duration_ms", "ai_usd"}  # proxy_usd is absent
    assert via_sql.cost == {"other": 1.0}


@pytest.mark.parametrize(
    "text",
    [
        '{"metrics": {"duration_ms": 12345678901234567890, "cost": {"ai_usd": 1}}}',
        # Beyond 64 bits: a float to orjson, an int to the standard library (malformed).
        '{"metrics": {"duration_ms": 18446744073709551616, "cost": {"ai_usd": 1}}}',
        '{"metrics": {"duration_ms": 1, "cost": {"total_usd": 123456789012345678901234567}}}',
        '{"metrics": {"duration_ms": 1e300, "cost": {"ai_usd": 1.5e19}}}',
        '{"note": 123456789012345678901234567, "metrics": {"duration_ms": 2}}',
        "null",
        '"text"',
        '{"metrics": {"duration_ms": 1500, "cost": {"ai_usd": 0.25, "total_usd": 1e2}}}',
        '{"metrics": {"duration_ms": NaN}}',
        "[1, 2]",
        '{"metrics": {"duration_ms": 1.5, "cost": {"ai_usd": true}}}',
    ],
)
def test_the_fast_parser_reads_every_result_as_the_standard_library_does(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from exporter.counting import results

    fast = decode_result(text, PATHS)
    monkeypatch.setattr(results, "_FAST_LOADS", None)
    assert fast == decode_result(text, PATHS)
