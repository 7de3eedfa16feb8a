"""collect.counting: logical's set-up without a database: what logical-setup prints per table,
what logical-drop prints to reverse it, and the start-up checks' verdict on catalog facts (the
same checks run as the exporter's role against real servers in tests/db/test_logical_setup.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.db.slot_setup import setup_script, teardown_script
from exporter.db.slot_verdict import (
    Published,
    ServerFacts,
    TableFacts,
    accepted_delete_filter,
    server_refusals,
    table_refusals,
)
from exporter.model import LogicalTarget
from exporter.settings import ConfigError, Settings, load_settings
from exporter.slot_commands import target_of
from tests.helpers import fast_queue
from tests.mapped_queue import tasks_queue

pytestmark = pytest.mark.usefixtures("restore_logging")

DSN = "postgresql://watcher:s3cret@db.invalid/shop"
COUNTED = ("job_id", "job_type", "status", "attempts", "run_after", "run_started_at", "result",
           "last_error", "created_at", "updated_at")  # fmt: skip
PG15 = 150_020
SERVER = ServerFacts(PG15, "logical", "10240", "watcher", may_stream=True, slot_free=True)


def _setup(capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    args = ["logical-setup", *flags, "--collect.counting", "logical", "--database.dsn", DSN]
    assert main(args, {}) == 0
    return capsys.readouterr().out


def _statements(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("--")]


def test_logical_setup_gives_the_reference_table_its_identity_index_and_column_list(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _setup(capsys, "--database.table", "app.jobs")
    listed = ", ".join(f'"{c}"' for c in COUNTED)
    assert _statements(out) == [
        'CREATE UNIQUE INDEX CONCURRENTLY "jobs_exporter_identity_idx" ON "app"."jobs" '
        '("job_id", "status", "attempts");',
        'ALTER TABLE "app"."jobs" REPLICA IDENTITY USING INDEX "jobs_exporter_identity_idx";',
        f'CREATE PUBLICATION "jobqueue_shop" FOR TABLE "app"."jobs" ({listed});',
        'ALTER ROLE "watcher" REPLICATION;',
    ]
    # Where column lists do not exist, FULL; and why the index is exact here.
    assert '--   ALTER TABLE "app"."jobs" REPLICA IDENTITY FULL;' in out
    assert "PostgreSQL 13 and 14" in out
    assert "the reference schema's transitions do" in out
    assert "s3cret" not in out
    for setting in ("wal_level", "max_replication_slots", "max_wal_senders",
                    "max_slot_wal_keep_size"):  # fmt: skip
        assert setting in out


def test_logical_setup_gives_a_mapped_table_full_and_offers_the_index_with_its_condition(
    tmp_path: Path,
) -> None:
    queue = tasks_queue(tmp_path / "tasks.yml", DSN)
    settings = Settings(
        queues=(replace(queue, collect=replace(queue.collect, counting="logical")),)
    )
    out = setup_script(settings, target_of)
    assert _statements(out) == [
        'ALTER TABLE "app"."tasks" REPLICA IDENTITY FULL;',
        'CREATE PUBLICATION "jobqueue_tasks" FOR TABLE "app"."tasks";',
        'ALTER ROLE "watcher" REPLICATION;',
    ]
    assert (
        '--   CREATE UNIQUE INDEX CONCURRENTLY "tasks_exporter_identity_idx" ON "app"."tasks" '
        '("id", "state", "tries");'
    ) in out
    assert "a completion that" in out
    assert "leaves a large result alone would lose its cost" in out
    # The optional filtered delete publication, with the mapped done value.
    assert """WHERE ("state" <> 'finished') WITH (publish = 'delete');""" in out


def test_logical_setup_prints_two_publications_when_the_setting_names_two(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _setup(capsys, "--collect.logical-publication", "jq,jq_deletes")
    statements = _statements(out)
    assert statements[2].startswith('CREATE PUBLICATION "jq" FOR TABLE "job" (')
    assert statements[2].endswith("WITH (publish = 'insert, update, truncate');")
    assert statements[3].startswith('CREATE PUBLICATION "jq_deletes" FOR TABLE "job" (')
    assert statements[3].endswith("""WHERE ("status" <> 3) WITH (publish = 'delete');""")
    assert "Optional" not in out  # already the set-up


def test_a_publication_setting_of_three_names_is_refused() -> None:
    with pytest.raises(ConfigError, match="two separated by a comma"):
        load_settings(None, {}, {"collect.logical_publication": "a,b,c"})


def test_logical_setup_gives_graphile_worker_full_and_says_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _setup(capsys, "--queue.profile", "graphile-worker")
    assert _statements(out)[:2] == [
        'ALTER TABLE "graphile_worker"."_private_jobs" REPLICA IDENTITY FULL;',
        'CREATE PUBLICATION "jobqueue_shop" FOR TABLE "graphile_worker"."_private_jobs";',
    ]
    assert "whole old row" in out
    assert "Optional" not in out  # its successes delete running rows: no filter is safe


def test_the_main_help_points_to_the_logical_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"], {}) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "'logical-setup --help' lists the flags of logical (--collect.logical-slot" in text
    assert main(["logical-setup", "--help"], {}) == 0
    assert "--collect.logical-allow-unbounded-wal" in capsys.readouterr().out


def test_the_reversal_undoes_each_statement_of_the_set_up() -> None:
    queue = fast_queue(DSN, name="shop")
    queue = replace(queue, collect=replace(queue.collect, logical_publication="jq,jq_deletes"))
    target = target_of(queue)
    assert target is not None
    assert _statements(teardown_script([(queue, target)])) == [
        'DROP PUBLICATION IF EXISTS "jq", "jq_deletes";',
        'ALTER TABLE "job" REPLICA IDENTITY DEFAULT;  -- PostgreSQL\'s default; restore the '
        "table's earlier identity if it had another",
        'DROP INDEX CONCURRENTLY IF EXISTS "job_exporter_identity_idx";',
        'ALTER ROLE "watcher" NOREPLICATION;',
    ]


# --- the verdict ---------------------------------------------------------------------------


def _reference() -> LogicalTarget:
    target = target_of(fast_queue(DSN))
    assert target is not None
    return target


def _published(**kw: object) -> Published:
    base = Published(
        "jobqueue_test", True, frozenset({"insert", "update", "delete", "truncate"}), True
    )
    return replace(base, **kw)  # type: ignore[arg-type]


INDEXED = TableFacts("i", ("job_id", "status", "attempts"), True, (_published(columns=COUNTED),))
FULL = TableFacts("f", (), True, (_published(),))


def _refusals(facts: TableFacts, target: LogicalTarget | None = None) -> list[str]:
    return table_refusals("q", target or _reference(), facts, "watcher", PG15)


def test_the_verdict_accepts_each_set_up_logical_setup_prints() -> None:
    assert _refusals(INDEXED) == []
    assert _refusals(FULL) == []
    split = (
        _published(name="jq", actions=frozenset({"insert", "update", "truncate"})),
        _published(name="jq_deletes", actions=frozenset({"delete"}), row_filter="(status <> 3)"),
    )
    assert _refusals(replace(FULL, publications=split)) == []
    listed = tuple(replace(p, columns=COUNTED) for p in split)
    assert _refusals(replace(INDEXED, publications=listed)) == []
    assert server_refusals("q", SERVER, allow_unbounded=False) == []


def test_the_verdict_refuses_an_identity_without_the_old_status_or_attempts() -> None:
    (default,) = _refusals(replace(FULL, identity="d", identity_columns=("job_id",)))
    assert "REPLICA IDENTITY DEFAULT (job_id), which does not carry the old status" in default
    assert "logical-setup" in default
    (nothing,) = _refusals(replace(FULL, identity="n"))
    assert "REPLICA IDENTITY NOTHING, which sends no old row" in nothing
    (two,) = _refusals(replace(INDEXED, identity_columns=("job_id", "status")))
    assert "does not carry the old attempts" in two
    assert "release (attempts - 1) from a failure" in two
    (dropped,) = _refusals(replace(INDEXED, identity_columns=()))
    assert "no index any more" in dropped


def test_the_verdict_refuses_a_column_list_on_a_full_table() -> None:
    (found,) = _refusals(replace(FULL, publications=(_published(columns=COUNTED),)))
    assert "has a column list on job, whose REPLICA IDENTITY is FULL" in found
    assert "refuses the queue's own UPDATE and DELETE" in found
    assert 'ALTER PUBLICATION "jobqueue_test" SET TABLE "job"' in found


def test_the_verdict_refuses_a_column_list_short_of_the_identity_or_the_counted_columns() -> None:
    short = tuple(c for c in COUNTED if c not in ("attempts", "result"))
    found = _refusals(replace(INDEXED, publications=(_published(columns=short),)))
    assert any("leaves out its replica identity's attempts" in f for f in found)
    assert any("leaves out attempts, result that the count reads" in f for f in found)


def test_the_verdict_refuses_row_filters_that_turn_updates_into_inserts_and_deletes() -> None:
    filtered = _published(row_filter="(status <> 2)")
    found = _refusals(replace(FULL, publications=(filtered,)))
    assert any("publishes updates of job WHERE (status <> 2)" in f for f in found)
    assert any("claims and completions would count as vanished or new jobs" in f for f in found)
    # A second publication without a filter publishes every row: the filter changes nothing.
    assert _refusals(replace(FULL, publications=(filtered, _published(name="all")))) == []


def test_the_verdict_accepts_only_the_printed_filter_on_a_publication_of_deletes() -> None:
    deletes = _published(name="d", actions=frozenset({"delete"}), row_filter="(status <> 1)")
    changes = _published(actions=frozenset({"insert", "update", "truncate"}))
    (found,) = _refusals(replace(FULL, publications=(changes, deletes)))
    assert "hides deletes of active rows" in found
    target = _reference()
    assert accepted_delete_filter("(status <> 3)", target)
    assert not accepted_delete_filter("((status <> 3) AND (status <> 4))", target)
    text = replace(target, key_column="state", done_value="finished")
    assert accepted_delete_filter("(state <> 'finished'::text)", text)
    assert accepted_delete_filter("((state)::text <> 'finished'::text)", text)
    assert not accepted_delete_filter("(state <> 'queued'::text)", text)


def test_the_verdict_refuses_publications_that_are_missing_or_hide_an_action() -> None:
    found = _refusals(replace(FULL, publications=(_published(exists=False),)))
    assert found == [
        "collect.logical_publication: queue q: publication jobqueue_test does not exist; the "
        "table's owner creates it (logical-setup prints it)"
    ]
    (left_out,) = _refusals(replace(FULL, publications=(_published(includes=False),)))
    assert 'ALTER PUBLICATION "jobqueue_test" ADD TABLE "job"' in left_out
    no_delete = _published(actions=frozenset({"insert", "update"}))
    (hidden,) = _refusals(replace(FULL, publications=(no_delete,)))
    assert "publishes deletes of job, which hides jobs deleted before they finished" in hidden


def test_the_verdict_refuses_different_column_lists_in_two_publications() -> None:
    two = (_published(columns=COUNTED), _published(name="b", columns=(*COUNTED, "payload")))
    (found,) = _refusals(replace(INDEXED, publications=two))
    assert "different column lists" in found


def test_the_verdict_refuses_the_server_settings_and_the_role_naming_the_fix() -> None:
    bad = ServerFacts(PG15, "replica", "-1", "watcher", may_stream=False, slot_free=False)
    wal, keep, role, slots = server_refusals("q", bad, allow_unbounded=False)
    assert "wal_level is replica" in wal
    assert "restart the server" in wal
    assert keep.startswith("collect.logical_allow_unbounded_wal: queue q")
    assert "max_slot_wal_keep_size is -1" in keep
    assert "JobQueueLogicalWalUnbounded" in keep
    assert 'ALTER ROLE "watcher" REPLICATION' in role
    assert "max_replication_slots" in slots
    assert len(server_refusals("q", bad, allow_unbounded=True)) == 3


def test_the_verdict_refuses_a_table_the_role_may_not_read() -> None:
    (found,) = _refusals(replace(FULL, readable=False))
    assert 'GRANT SELECT ON "job" TO "watcher"' in found


def test_the_verdict_refuses_a_table_whose_rows_row_level_security_hides() -> None:
    (found,) = _refusals(replace(FULL, rows_hidden=True))
    assert "row-level security hides every row of job from role watcher" in found
    assert 'CREATE POLICY exporter_read ON "job" FOR SELECT TO "watcher"' in found


def test_before_postgresql_15_lists_and_filters_are_not_looked_for() -> None:
    facts = replace(FULL, publications=(_published(columns=COUNTED, row_filter="(x)"),))
    assert table_refusals("q", _reference(), facts, "watcher", 140_010) == []
