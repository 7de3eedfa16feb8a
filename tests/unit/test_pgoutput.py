"""The pgoutput v1 decoder: real messages PostgreSQL 15 sent, and the malformed ones it must refuse."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pytest

from exporter.db.pgoutput import (
    UNCHANGED,
    Begin,
    Commit,
    Delete,
    Insert,
    PgoutputError,
    Relation,
    Truncate,
    Update,
    decode,
)

FIXTURE = Path(__file__).parent / "fixtures" / "pgoutput_job_lifecycle.json"


def captured() -> list[bytes]:
    """One job's life on the reference table, as a pgoutput slot streamed it (see the fixture)."""
    return [base64.b64decode(text) for text in json.loads(FIXTURE.read_text())["messages"]]


def test_a_captured_job_life_decodes_into_its_transitions_in_commit_order() -> None:
    messages = [decode(payload) for payload in captured()]
    relation = messages[1]
    assert isinstance(relation, Relation)
    assert (relation.namespace, relation.name, relation.replica_identity) == ("public", "job", "f")
    status = relation.columns.index("status")
    attempts = relation.columns.index("attempts")
    changes = [m for m in messages if isinstance(m, Insert | Update | Delete)]
    steps: list[tuple[str, object, object]] = []
    for change in changes:
        if isinstance(change, Insert):
            steps.append(("insert", None, change.new[status]))
        elif isinstance(change, Update):
            assert change.old is not None
            assert not change.old_is_key
            steps.append(("update", change.old[status], change.new[status]))
        else:
            steps.append(("delete", change.old[status], change.old[attempts]))
    # enqueue, claim, fail (retried), claim, complete, and the DONE row deleted.
    assert steps == [
        ("insert", None, "1"),
        ("update", "1", "2"),
        ("update", "2", "1"),
        ("update", "1", "2"),
        ("update", "2", "3"),
        ("delete", "3", "2"),
    ]
    commits = [m for m in messages if isinstance(m, Commit)]
    begins = [m for m in messages if isinstance(m, Begin)]
    assert len(commits) == len(begins) == 6
    assert [b.final_lsn for b in begins] == [c.commit_lsn for c in commits]
    lsns = [c.commit_lsn for c in commits]
    assert lsns == sorted(lsns)
    assert len(set(lsns)) == len(lsns)
    # Commit times are Unix seconds: the capture was made in 2026.
    assert all(1_767_225_600 < c.commit_time < 1_798_761_600 for c in commits)


def test_the_completed_row_carries_its_result_document() -> None:
    messages = [decode(payload) for payload in captured()]
    relation = next(m for m in messages if isinstance(m, Relation))
    completion = [m for m in messages if isinstance(m, Update)][-1]
    result = completion.new[relation.columns.index("result")]
    assert isinstance(result, str)
    assert json.loads(result)["metrics"]["cost"]["ai_usd"] == 0.01


def tuple_data(*values: bytes | str | None) -> bytes:
    out = struct.pack(">h", len(values))
    for value in values:
        if value is None:
            out += b"n"
        elif value == "toast":
            out += b"u"
        else:
            assert isinstance(value, bytes)
            out += b"t" + struct.pack(">i", len(value)) + value
    return out


def test_key_only_old_rows_and_unchanged_toast_are_told_apart() -> None:
    update = decode(b"U" + struct.pack(">I", 7) + b"K" + tuple_data(b"42", b"2")
                    + b"N" + tuple_data(b"42", b"3", "toast"))  # fmt: skip
    assert update == Update(7, ("42", "2"), True, ("42", "3", UNCHANGED))
    same_key = decode(b"U" + struct.pack(">I", 7) + b"N" + tuple_data(b"42", None))
    assert same_key == Update(7, None, False, ("42", None))
    delete = decode(b"D" + struct.pack(">I", 7) + b"O" + tuple_data(b"42", b"4"))
    assert delete == Delete(7, ("42", "4"), False)


def test_truncate_names_its_relations_and_options() -> None:
    message = decode(b"T" + struct.pack(">IB", 2, 3) + struct.pack(">II", 7, 9))
    assert message == Truncate((7, 9), cascade=True, restart_identity=True)


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"Z",
        b"B" + b"\0" * 5,
        b"I" + struct.pack(">I", 7) + b"X" + tuple_data(b"1"),
        b"I" + struct.pack(">I", 7) + b"N" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 9) + b"ab",
        b"I" + struct.pack(">I", 7) + b"N" + struct.pack(">h", 1) + b"q",
        b"D" + struct.pack(">I", 7) + b"N" + tuple_data(b"1"),
        b"R" + struct.pack(">I", 7) + b"public",
        b"I" + struct.pack(">I", 7) + b"N" + tuple_data(b"1") + b"extra",
    ],
    ids=["empty", "unknown kind", "short begin", "insert without N", "short value",
         "bad column kind", "delete without old", "unterminated string", "trailing bytes"],
)  # fmt: skip
def test_malformed_messages_raise_pgoutput_error_never_anything_else(payload: bytes) -> None:
    with pytest.raises(PgoutputError):
        decode(payload)
