"""Reading the status page back: its queue rows, links and tags, from HTML or a browser's DOM."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from typing import Any, cast


class RenderedPage(HTMLParser):
    """The text of each queue's row (``<tr id="queue-NAME">``), every link and tag seen.

    ``rows`` holds every piece of text in a row; ``cells`` the row's text cell by cell under the
    table's column names, so a test reads "pending" and not "the ninth cell".
    """

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: dict[str, list[str]] = {}
        self.links: list[str] = []
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str | None]] = []
        self.headers: list[str] = []
        self.cells: dict[str, dict[str, str]] = {}
        self._row: str | None = None
        self._cell: list[str] | None = None
        self._in_header = False
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs.extend(attrs)
        found = dict(attrs)
        if tag == "a":
            self.links.append(found.get("href") or "")
        row = found.get("id") or ""
        if tag == "tr" and row.startswith("queue-"):
            self._row = row.removeprefix("queue-")
            self.rows[self._row] = []
            self.cells[self._row] = {}
        if tag == "th":
            self._in_header = True
            self.headers.append("")
        if tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "th":
            self._in_header = False
        if tag == "td" and self._row is not None and self._cell is not None:
            row = self.cells[self._row]
            row[self.headers[len(row)]] = " ".join(self._cell)
            self._cell = None
        if tag == "tr":
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._in_header:
            self.headers[-1] += data.strip()
        if self._cell is not None and data.strip():
            self._cell.append(data.strip())
        if self._row is not None and data.strip():
            self.rows[self._row].append(data.strip())


# Appended to a copy of the page (the page itself carries no script): once laid out, every
# queue row's cells with their column names and boxes, and the document's width, as JSON in
# <pre id="layout">, which a browser's --dump-dom then returns.
LAYOUT_SCRIPT = """<script>
const names = [...document.querySelectorAll("th")].map(th => th.textContent.trim());
const rows = {};
for (const tr of document.querySelectorAll("tr[id^=queue-]")) {
  rows[tr.id.slice(6)] = [...tr.children].map((td, i) => {
    const box = td.getBoundingClientRect();
    return {name: names[i], left: box.left, right: box.right, top: box.top,
            bottom: box.bottom, text: td.innerText.trim()};
  });
}
const heads = [...document.querySelectorAll("th")].map(th => {
  const box = th.getBoundingClientRect();
  return {name: th.textContent.trim(), left: box.left, right: box.right, shown: box.width > 0};
});
const out = document.createElement("pre");
out.id = "layout";
out.textContent = JSON.stringify({
  viewport: window.innerWidth, scroll: document.documentElement.scrollWidth, heads, rows});
document.body.appendChild(out);
</script>"""


def with_layout_probe(page: str) -> str:
    """The page with LAYOUT_SCRIPT before </body>."""
    assert page.count("</body>") == 1
    return page.replace("</body>", LAYOUT_SCRIPT + "</body>")


def layout_of(dom: str) -> dict[str, Any]:
    """The JSON LAYOUT_SCRIPT wrote into a dumped DOM."""
    found = re.search(r'<pre id="layout">(.*?)</pre>', dom, re.S)
    assert found, "the layout probe did not run"
    return cast(dict[str, Any], json.loads(html.unescape(found.group(1))))
