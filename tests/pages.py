"""Reading the status page back: its queue rows, links and tags, from HTML or a browser's DOM."""

from __future__ import annotations

from html.parser import HTMLParser


class RenderedPage(HTMLParser):
    """The text of each queue's row (``<tr id="queue-NAME">``), every link and tag seen."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.rows: dict[str, list[str]] = {}
        self.links: list[str] = []
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str | None]] = []
        self._row: str | None = None
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

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._row is not None and data.strip():
            self.rows[self._row].append(data.strip())
