"""Counting modes, written once and pure (no I/O): each hands out Query values and takes rows back.

The horizon (``horizon``), the transition cursor over ``updated_at`` (``changefeed`` and
``tracker``), the event log, the terminal-state cursor and the active-set diff. The exactness
argument of each is in docs/exactness.md.
"""
