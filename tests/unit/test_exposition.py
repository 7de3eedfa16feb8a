"""The /metrics cache: rendered and compressed once per state, never a stale health verdict, and
the coding each scraper accepts."""

from __future__ import annotations

import asyncio
import gzip

import pytest

from exporter.board import Board
from exporter.model import QueueStatus, QueueView
from exporter.web import encoding
from exporter.web.encoding import choose_encoding, encode_all, parse_accept_encoding
from exporter.web.exposition import Exposition
from tests.unit.factories import view

ALL = {"identity": b"", "gzip": b"", "zstd": b""}
NO_ZSTD = {"identity": b"", "gzip": b""}


@pytest.mark.parametrize(
    ("header", "available", "chosen"),
    [
        (None, ALL, "identity"),  # no header: no coding
        ("", ALL, "identity"),
        ("gzip", ALL, "gzip"),  # what Prometheus sends
        ("GZip", ALL, "gzip"),
        ("x-gzip", ALL, "gzip"),
        ("gzip, deflate, br, zstd", ALL, "zstd"),  # equal q: the smallest body
        ("gzip, deflate, br, zstd", NO_ZSTD, "gzip"),
        ("zstd;q=0.5, gzip", ALL, "gzip"),
        ("gzip;q=0, identity", ALL, "identity"),
        ("gzip;q=0", ALL, "identity"),  # identity stays acceptable unless excluded
        ("*", ALL, "zstd"),
        ("*;q=0.1, gzip;q=0.2", NO_ZSTD, "gzip"),
        ("identity;q=0, *;q=0", ALL, "identity"),  # nothing acceptable: sent plain anyway
        ("br", ALL, "identity"),
        ("gzip;q=nonsense, identity", ALL, "identity"),  # a malformed member is ignored
        ("gzip;q=2", ALL, "identity"),
        (" gzip ; q=0.8 , identity;q=0.7", ALL, "gzip"),
    ],
)
def test_the_coding_is_the_available_one_the_scraper_rates_highest(
    header: str | None, available: dict[str, bytes], chosen: str
) -> None:
    assert choose_encoding(header, available) == chosen


def test_accept_encoding_parsing_keeps_q_values() -> None:
    assert parse_accept_encoding("gzip;q=0.5, ZSTD, , *;q=0") == {
        "gzip": 0.5,
        "zstd": 1.0,
        "*": 0.0,
    }


def test_every_coding_decodes_to_the_body_and_gzip_is_deterministic() -> None:
    body = b'jobqueue_up{queue="a"} 1\n' * 5000
    encoded = encode_all(body)
    assert encoded["identity"] is body
    assert gzip.decompress(encoded["gzip"]) == body
    assert len(encoded["gzip"]) < len(body) / 20
    assert encode_all(body)["gzip"] == encoded["gzip"]  # no timestamp in the header
    if encoding.zstd_compress is None:
        assert "zstd" not in encoded
    else:
        from backports.zstd import decompress

        assert decompress(encoded["zstd"]) == body


class CountingBoard(Board):
    """A board on a clock the test moves, counting the renderings it is asked for."""

    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(monotonic=lambda: self.now)
        self.renders = 0
        self.publish(QueueStatus(view(up=True, fresh_until=10.0), None, None, None))

    def views(self) -> list[QueueView]:
        self.renders += 1
        return super().views()


def up_line(body: bytes) -> bytes:
    return next(line for line in body.splitlines() if line.startswith(b"jobqueue_up{"))


async def test_fifty_concurrent_scrapes_cost_one_rendering_in_every_coding() -> None:
    board = CountingBoard()
    exposition = Exposition(board)
    bodies = await asyncio.gather(*(exposition.body() for _ in range(50)))
    assert board.renders == 1
    assert all(b is bodies[0] for b in bodies)
    assert gzip.decompress(bodies[0]["gzip"]) == bodies[0]["identity"]


async def test_a_changed_verdict_is_never_served_from_the_previous_rendering() -> None:
    board = CountingBoard()
    exposition = Exposition(board)
    assert up_line((await exposition.body())["identity"]).endswith(b" 1.0")
    board.now = 10.5  # the snapshot went stale; nothing was published meanwhile
    body = await exposition.body()
    assert up_line(body["identity"]).endswith(b" 0.0")
    assert up_line(gzip.decompress(body["gzip"])).endswith(b" 0.0")
    assert b"jobqueue_jobs{" not in body["identity"]  # the stale gauges are withdrawn
    # A failed collection publishes up 0 at once: never served from the rendering before it.
    board.now = 0.0
    assert up_line((await exposition.body())["identity"]).endswith(b" 1.0")
    board.publish(QueueStatus(view(up=False, fresh_until=10.0), "down", "down", 1.0))
    assert up_line((await exposition.body())["identity"]).endswith(b" 0.0")


async def test_a_new_generation_with_the_same_verdict_is_served_one_rendering_late() -> None:
    board = CountingBoard()
    exposition = Exposition(board)
    first = await exposition.body()
    board.publish(QueueStatus(view(up=True, fresh_until=10.0), None, None, None))
    exposition.refresh()  # what the board's listener does after each publication
    pending = exposition._pending
    assert pending is not None
    assert await exposition.body() is first  # counters may trail by one collection, no more
    await pending
    assert await exposition.body() is not first
    assert board.renders == 2


async def test_a_body_leaves_only_once_its_stream_positions_are_confirmed() -> None:
    board = CountingBoard()
    board.publish(QueueStatus(view(up=True, fresh_until=10.0, position=500), None, None, None))
    confirmed: list[int] = []
    release = asyncio.Event()

    async def confirm(position: int) -> None:
        await release.wait()  # the stream has not sent it yet
        confirmed.append(position)

    board.confirmers["orders"] = confirm
    exposition = Exposition(board)
    exposition.refresh()
    assert exposition._pending is not None
    await exposition._pending
    assert confirmed == []  # rendered is not served
    scrape = asyncio.create_task(exposition.body())
    await asyncio.sleep(0.05)
    assert not scrape.done()  # the response waits for the slot
    release.set()
    body = await scrape
    assert confirmed == [500]
    assert b"orders" in body["identity"]
    # Counted later but not yet rendered: a scrape of the older body carries only 500.
    board.publish(QueueStatus(view(up=True, fresh_until=10.0, position=900), None, None, None))
    await exposition.body()
    assert confirmed[-1] == 500
