"""The README's first screen (everything above "## Your own queue") reads in under a minute.

A minute is 238 words: adults' average silent reading rate of non-fiction (Brysbaert, 2019,
"How many words do we read per minute?"). Fenced code is scanned, not read, so it does not
count; the detail a newcomer needs later lives in the README's Development section.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORDS_PER_MINUTE = 238
FENCED = re.compile(r"^```.*?^```", re.S | re.M)


def first_screen(readme: str) -> str:
    """The README down to its first section after "Two commands"."""
    return readme.split("\n## Your own queue\n", 1)[0]


def prose_words(text: str) -> int:
    """Words outside fenced code blocks."""
    return len(FENCED.sub("", text).split())


def test_the_readmes_first_screen_reads_in_under_a_minute() -> None:
    screen = first_screen((ROOT / "README.md").read_text())
    assert "\n## Two commands\n" in screen
    words = prose_words(screen)
    assert words <= WORDS_PER_MINUTE, f"{words} words: move detail below, e.g. to Development"
    # What the demo prints is how a newcomer finds the rest.
    assert "status page" in screen
    assert "DSN" in screen


def test_fenced_code_is_not_counted() -> None:
    text = "one two\n```sh\nscripts/dev demo # many words here\n```\nthree\n## Your own queue\nx"
    assert prose_words(first_screen(text)) == 3
