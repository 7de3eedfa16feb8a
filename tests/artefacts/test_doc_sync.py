"""Every anchor the documents link to, and every setting they name, exists in the code.

The documents are README.md, docs/*.md, dashboards/panels.md and bench/RESULTS.md.
Every profile also has its row in the README's presets table and its column in docs/presets.md's
"What each preset exports", and every preset a ground-truth test driving its library.

- **Anchors.** A Markdown link ``[text](file.md#anchor)`` or ``[text](#anchor)`` must land on
  a heading of that file, slugged as GitHub does: the heading's text without its Markdown
  (backticks, emphasis, link targets), lower-cased, every character that is not a letter, a
  digit, ``_``, ``-`` or a space dropped, each space a ``-``; the second heading with the same
  slug gets ``-1``, the third ``-2``. Headings inside fenced code do not count.
- **Settings.** A dotted key of a settings section written anywhere in the text
  (``collect.interval``, ``queues[0].database.dsn``, ``table.columns.attempts``), a flag of
  ours (``--collect.interval``, ``--no-web.enable-lifecycle``, ``--config.check``) and an
  environment variable ``JOBQUEUE_EXPORTER_…`` must be one the exporter accepts: a key of
  exporter/settings (or its flag spelled with dots), a flag of one of the commands' parsers,
  a variable the code reads. A dotted name that ends in a file extension (``web.py``), sits
  inside a path (``exporter/web.py``) or a longer dotted name (``pg_catalog.web``), or is
  called (``log.warning(``) is not a setting; nor is a misspelling the document shows being
  refused, on a line with "did you mean" (``unknown flag --collect.intervall (did you mean
  --collect.interval?)``), wherever else the document writes it (the command that got it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.profiles import PRESETS, PROFILES
from exporter.settings.flags import COMMANDS, build_parser, option_strings
from exporter.settings.sources import SETTINGS
from exporter.settings.table import CANCELLED_KEY, IGNORE_KEY, ROLES, STATUS_NAMES

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "dashboards" / "panels.md",
    ROOT / "bench" / "RESULTS.md",
)
# Where the code names environment variables of its own beyond the settings' (the DSN, the
# config file, the tests' server).
CODE = ("exporter", "scripts", "bench", "deploy", "Dockerfile", ".ci", "tests/conftest.py")

LINK = re.compile(r"\]\(([^)\s]+)\)")
SCHEME = re.compile(r"[a-z][a-z0-9+.-]*:")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
SECTIONS = ("database", "collect", "queue", "web", "log", "alerts", "table")
# A section name starts the key: not after a word character and a dot (pg_catalog.web), a
# path's slash or a dash (that is a flag, checked on its own).
DOTTED = re.compile(
    r"(?<![\w/\-])(?<!\w\.)(?:" + "|".join(SECTIONS) + r")\.[a-z][a-z0-9_.\-]*[a-z0-9_]"
)
FLAG = re.compile(
    r"(?<![\w-])--(?:no-)?(?:" + "|".join((*SECTIONS, "config", "prometheusrule")) + r")"
    r"\.[a-z][a-z0-9.\-]*[a-z0-9]"
)
ENV = re.compile(r"\bJOBQUEUE_EXPORTER_[A-Z0-9_]*[A-Z0-9]")
FILE_SUFFIXES = ("py", "md", "sql", "yml", "yaml", "json", "png", "txt", "toml", "sh")


# --- Anchors ----------------------------------------------------------------------------


def heading_text(markdown: str) -> str:
    """A heading's visible text: link targets, images, HTML tags and markup characters gone."""
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", markdown)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    return text.replace("`", "").replace("*", "")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before the -1, -2 of repeated headings)."""
    kept = re.sub(r"[^\w\- ]", "", heading_text(heading).strip().lower())
    return kept.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every anchor GitHub gives the document's headings."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    in_fence = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        match = None if in_fence else HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def outside_fences(markdown: str) -> str:
    """The text with fenced code blocks blanked out (a link in code is not a link)."""
    out, in_fence = [], False
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            out.append("")
        else:
            out.append("" if in_fence else line)
    return "\n".join(out)


def broken_anchors(document: Path, text: str) -> list[str]:
    """The links of ``text`` (held by ``document``) whose anchor no heading of the target has."""
    broken = []
    for target in (m.group(1) for m in LINK.finditer(outside_fences(text))):
        if SCHEME.match(target) or "#" not in target:
            continue
        path, anchor = target.split("#", 1)
        if not path:
            headings = anchors(text)
        elif path.endswith(".md") and (document.parent / path).is_file():
            headings = anchors((document.parent / path).read_text())
        else:
            continue  # a missing file is test_doc_paths' to report; only .md has headings
        if anchor not in headings:
            broken.append(target)
    return broken


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_linked_anchor_is_a_heading(document: Path) -> None:
    broken = broken_anchors(document, document.read_text())
    assert not broken, f"{document.relative_to(ROOT)} links to anchors no heading has: {broken}"


def test_slugs_follow_githubs_rule() -> None:
    assert slug("graphile-worker 0.18") == "graphile-worker-018"
    assert slug("From the reference queue's `ops()` and `cost_buckets()`") == (
        "from-the-reference-queues-ops-and-cost_buckets"
    )
    assert slug("The exporter's share of the database's statement time (issue 20)") == (
        "the-exporters-share-of-the-databases-statement-time-issue-20"
    )
    assert slug("What [the indexes](docs/x.md) *cost*, → in bytes") == (
        "what-the-indexes-cost--in-bytes"
    )
    text = "# A\n\n## Kinds of value\n\n```sh\n# not a heading\n```\n\n### Kinds of value\n"
    assert anchors(text) == {"a", "kinds-of-value", "kinds-of-value-1"}


def test_a_link_to_a_missing_heading_is_reported() -> None:
    readme = ROOT / "README.md"
    text = (
        "[ok](docs/presets.md#graphile-worker-018) [gone](docs/presets.md#graphile-worker-017)"
        " [here](#how-it-works) [nowhere](#what-the-indexes-cost-the-queue)"
        " [web](https://example.com/x.md#y) [file only](docs/presets.md)"
        "\n\n## How it works\n\n```\n[in code](#not-checked)\n```\n"
    )
    assert broken_anchors(readme, text) == [
        "docs/presets.md#graphile-worker-017",
        "#what-the-indexes-cost-the-queue",
    ]


# --- Settings ---------------------------------------------------------------------------


def known_keys() -> set[str]:
    """Every dotted spelling of a setting: its key, its flag without dashes, the table keys."""
    keys = set(SETTINGS)
    keys |= {s.flag.removeprefix("--") for s in SETTINGS.values()}
    keys |= {"table.name", "table.columns", "table.status_values", "table.timestamps"}
    keys |= {f"table.columns.{role}" for role in ROLES}
    keys |= {f"table.status_values.{status}"
             for status in (*STATUS_NAMES, CANCELLED_KEY, IGNORE_KEY)}  # fmt: skip
    keys.add("table.timestamps.time_zone")
    return keys


def known_flags() -> set[str]:
    """Every flag of every command, ``--no-`` forms included."""
    return {flag for command in COMMANDS for flag in option_strings(build_parser(command))}


def known_env() -> set[str]:
    """The settings' variables and those the code reads by name."""
    names = {s.env for s in SETTINGS.values()}
    for entry in CODE:
        path = ROOT / entry
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        for file in files:
            if "__pycache__" in file.parts or file.suffix in (".png", ".pyc"):
                continue
            names |= set(ENV.findall(file.read_text(errors="replace")))
    return names


def unknown_settings(text: str, keys: set[str], flags: set[str], env: set[str]) -> list[str]:
    """The setting names, flags and variables in ``text`` that the exporter does not have."""
    shown = {
        m.group(0)
        for line in text.splitlines()
        if "did you mean" in line
        for pattern in (DOTTED, FLAG)
        for m in pattern.finditer(line)
    }
    unknown = []
    for line in text.splitlines():
        for match in DOTTED.finditer(line):
            name = match.group(0)
            called = line[match.end() : match.end() + 1] == "("
            if not (called or name.rsplit(".", 1)[-1] in FILE_SUFFIXES or name in keys | shown):
                unknown.append(name)
        unknown += [m.group(0) for m in FLAG.finditer(line) if m.group(0) not in flags | shown]
        unknown += [m.group(0) for m in ENV.finditer(line) if m.group(0) not in env]
    return unknown


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_setting_a_document_names_exists(document: Path) -> None:
    unknown = unknown_settings(document.read_text(), known_keys(), known_flags(), known_env())
    assert not unknown, f"{document.relative_to(ROOT)} names settings that do not exist: {unknown}"


def test_the_rule_finds_settings_that_do_not_exist_and_ignores_files() -> None:
    text = (
        "`collect.interval`, `collect.cost_paths`, queues[0].database.dsn, `web.config.file`,"
        " table.columns.attempts, table.columns.tires, `--collect.interval=5s`,"
        " `--no-web.enable-lifecycle`, `--collect.intervall`, `--config.check`,"
        " `--storage.tsdb.path`, exporter/web.py, `web.py`, pg_catalog.web.x, log.warning(x),"
        " JOBQUEUE_EXPORTER_DSN, JOBQUEUE_EXPORTER_COLLECT_INTERVALL, log.level=debug.\n"
        "$ jobqueue-exporter --collect.timeuot 5s\n"
        "error: unknown flag --collect.timeuot (did you mean --collect.timeout?)\n"
    )
    assert unknown_settings(text, known_keys(), known_flags(), known_env()) == [
        "collect.cost_paths",
        "table.columns.tires",
        "--collect.intervall",
        "JOBQUEUE_EXPORTER_COLLECT_INTERVALL",
    ]


def test_every_command_has_a_row_in_the_configuration_commands_table() -> None:
    docs = (ROOT / "docs" / "configuration.md").read_text()
    table = docs.split("\n## Commands and other flags\n\n", 1)[1].split("\n\n", 1)[0]
    rows = {line.split("|")[1].strip() for line in table.splitlines()}
    missing = [c for c in COMMANDS if f"`{c}`" not in rows and f"`{c}` (the default)" not in rows]
    assert not missing, f"docs/configuration.md, Commands and other flags: no row for {missing}"


# --- Presets ----------------------------------------------------------------------------


def table_after(markdown: str, heading: str) -> list[list[str]]:
    """The cells of the first table under ``heading``, one list per row (header included)."""
    section = markdown.split(f"\n{heading}\n", 1)[1]
    rows = [line for line in section.split("\n#", 1)[0].splitlines() if line.startswith("|")]
    return [
        [cell.strip() for cell in row.strip("|").split("|")] for row in rows if "---" not in row
    ]


def test_every_profile_has_a_row_in_the_readme_presets_table() -> None:
    rows = table_after((ROOT / "README.md").read_text(), "## Presets")
    assert {row[0] for row in rows[1:]} == {f"`{name}`" for name in PROFILES}


def test_every_preset_has_a_column_in_what_each_preset_exports() -> None:
    header = table_after((ROOT / "docs" / "presets.md").read_text(), "## What each preset exports")[
        0
    ]
    # A column may stand for several profiles of one library: "`a`, `b` (Library 1.0)".
    named = {name for cell in header for name in re.findall(r"`([^`]+)`", cell.split("(")[0])}
    assert named == set(PROFILES)


# Each preset's ground truth: the module that drives the real library and compares every counter
# with its record. A new preset fails the test below until it has one and is listed here.
GROUND_TRUTH = {
    "procrastinate": "test_procrastinate.py",
    "pgqueuer": "test_pgqueuer.py",
    "pgboss": "test_pgboss.py",
    "django-tasks": "test_django_tasks.py",
    "oban": "test_oban.py",
    "graphile-worker": "test_graphile.py",
    "solid-queue": "test_solid_queue.py",
    "solid-queue-unpreserved": "test_solid_queue_unpreserved.py",
    "good-job": "test_good_job.py",
    "river": "test_river.py",
}


def test_every_preset_is_proven_by_a_ground_truth_test_of_its_library() -> None:
    assert set(GROUND_TRUTH) == set(PRESETS)
    for name, module in GROUND_TRUTH.items():
        path = ROOT / "tests" / "system" / "presets" / module
        assert path.is_file(), f"{name}: no ground-truth test {path.relative_to(ROOT)}"
        text = path.read_text()
        # Outside the fast tier: library when it starts the library, slow when it replays its
        # statements (Solid Queue: no Ruby here).
        assert re.search(r"pytest\.mark\.(library|slow)", text), f"{module} runs in the fast tier"
        assert re.search(rf'RecordedPoller\(\s*\w+,\s*"{re.escape(name)}"', text), (
            f"{module} does not count a {name} queue"
        )
