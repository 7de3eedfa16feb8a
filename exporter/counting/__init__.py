"""Counting modes, written once and pure (no I/O): each hands out Query values and takes rows back.

The horizon (``horizon``), the transition cursor over ``updated_at`` (``change_cursor`` and
``tracker``), and the library readers (``reader``): the event log, the terminal-state cursor
and active-set diff, the enqueue window, and the in-place state diff (``statediff``), which a
preset parameterises by its state names. The exactness argument of each is in
docs/exactness.md.
"""
