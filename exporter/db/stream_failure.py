"""How a run of the change stream ends: psycopg2 errors as a reason and the server's first line.

The reason comes from the SQLSTATE where the server sent one (PostgreSQL's errcodes.txt), never
from the message text, which the server may write in any language. A connection that could not
be made, or that broke, has none: the caller says which it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exporter.db.pool import DatabaseError
from exporter.vocabulary import PERMISSION, SCHEMA, STREAM, STREAM_IN_USE, STREAM_SETUP

EXTRA_HINT = (
    "collect.counting: logical needs psycopg2: pip install '.[logical]' from a source checkout, "
    "or pip install 'jobqueue-exporter[logical]'"
)
# SQLSTATEs the stream tells apart.
OBJECT_IN_USE = "55006"  # the slot is active for another process
NOT_IN_PREREQUISITE_STATE = "55000"  # an invalidated slot (checked in the catalog), wal_level
INSUFFICIENT_PRIVILEGE = "42501"


def psycopg2_modules() -> tuple[Any, Any]:
    """psycopg2 and psycopg2.extras, or DatabaseError naming the extra that installs them."""
    try:
        import psycopg2
        import psycopg2.extras
    except ImportError:
        raise DatabaseError(SCHEMA, EXTRA_HINT) from None
    return psycopg2, psycopg2.extras


@dataclass(frozen=True)
class StreamFailure:
    """Why a run ended: a reason of jobqueue_exporter_logical_stream_restarts_total, and the
    server's (or libpq's) first line."""

    reason: str
    message: str

    def error(self) -> DatabaseError:
        """The collection error it is reported as (reason ``stream``)."""
        return DatabaseError(STREAM, f"the change stream failed ({self.reason}): {self.message}")


def failure_of(exc: BaseException, unknown: str) -> StreamFailure:
    """A psycopg2 error as a failure: its SQLSTATE's reason (``unknown`` when it has none: a
    connection that could not be made, or that broke), and its first line."""
    code = getattr(exc, "pgcode", None) or ""
    if not code or code.startswith(("08", "57")):
        reason = unknown
    elif code == OBJECT_IN_USE:
        reason = STREAM_IN_USE
    elif code == INSUFFICIENT_PRIVILEGE or code.startswith("28"):
        reason = PERMISSION
    else:
        reason = STREAM_SETUP
    return StreamFailure(reason, first_line(exc))


def first_line(exc: BaseException) -> str:
    """The first line of an error's text (a server error's DETAIL and HINT follow it)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
