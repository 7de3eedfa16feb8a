"""The benchmark names pg_stat_statements' entries after the exporter's named queries."""

from __future__ import annotations

from bench.statements import label

NAMES = {
    "dead": '-- Served by the partial index.\nSELECT job_type, count(*) AS jobs FROM "job"\n'
    "WHERE status = 4 GROUP BY job_type;",
    "existing": 'SELECT job_id::text AS job_id FROM "job" WHERE job_id = ANY($1::uuid[]);',
}


def test_a_normalised_statement_gets_its_query_name() -> None:
    # pg_stat_statements drops the comment and the semicolon and shows constants as $n.
    seen = 'SELECT job_type, count(*) AS jobs FROM "job"\n WHERE status = $1 GROUP BY job_type'
    assert label(seen, NAMES) == "dead"
    seen = 'SELECT job_id::text AS job_id FROM "job" WHERE job_id = ANY($1::uuid[])'
    assert label(seen, NAMES) == "existing"


def test_another_statement_shows_its_start_on_one_line() -> None:
    seen = "SELECT EXISTS (\n  SELECT $3 FROM pg_locks WHERE locktype = $4 AND granted AND pid = pg_backend_pid())"
    shown = label(seen, NAMES)
    assert shown == "SELECT EXISTS ( SELECT $3 FROM pg_locks WHERE locktype = $4 …"
    assert label("COMMIT", NAMES) == "COMMIT"


def test_a_null_value_is_a_constant_and_is_null_still_matches() -> None:
    # pg_stat_statements shows THEN NULL as THEN $n, but keeps IS NULL as written.
    names = {"picked": "SELECT CASE WHEN s BETWEEN 1 AND 4 THEN NULL ELSE s END FROM t "
             "WHERE e IS NULL;"}  # fmt: skip
    seen = "SELECT CASE WHEN s BETWEEN $1 AND $2 THEN $3 ELSE s END FROM t WHERE e IS NULL"
    assert label(seen, names) == "picked"
