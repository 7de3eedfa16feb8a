"""The /metrics cache: rendered and compressed once per state, never a stale health verdict, and
the coding each scraper accepts."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Hashable, Sequence

import pytest

from exporter.model import ConfigStatus, QueueStatus, QueueView
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


class Source:
    """A StateSource whose verdict the test flips, counting the renderings it is asked for."""

    def __init__(self) -> None:
        self.up = True
        self.generation_ = 0
        self.renders = 0

    def generation(self) -> Hashable:
        return self.generation_

    def verdict(self) -> Hashable:
        return self.up

    def views(self) -> Sequence[QueueView]:
        self.renders += 1
        return [view(up=self.up)]

    def readiness(self) -> Sequence[tuple[str, str | None]]:
        return [("orders", None if self.up else "down")]

    def config(self) -> ConfigStatus:
        return ConfigStatus(last_success_at=1.0)

    def queue_status(self) -> Sequence[QueueStatus]:
        return []


def up_line(body: bytes) -> bytes:
    return next(line for line in body.splitlines() if line.startswith(b"jobqueue_up{"))


async def test_fifty_concurrent_scrapes_cost_one_rendering_in_every_coding() -> None:
    source = Source()
    exposition = Exposition(source)
    bodies = await asyncio.gather(*(exposition.body() for _ in range(50)))
    assert source.renders == 1
    assert all(b is bodies[0] for b in bodies)
    assert gzip.decompress(bodies[0]["gzip"]) == bodies[0]["identity"]


async def test_a_changed_verdict_is_never_served_from_the_previous_rendering() -> None:
    source = Source()
    exposition = Exposition(source)
    assert up_line((await exposition.body())["identity"]).endswith(b" 1.0")
    source.up = False  # a collection failed; no new generation yet
    body = await exposition.body()
    assert up_line(body["identity"]).endswith(b" 0.0")
    assert up_line(gzip.decompress(body["gzip"])).endswith(b" 0.0")


async def test_a_new_generation_with_the_same_verdict_is_served_one_rendering_late() -> None:
    source = Source()
    exposition = Exposition(source)
    first = await exposition.body()
    source.generation_ += 1
    exposition.refresh()  # what the service does after each collection
    pending = exposition._pending
    assert pending is not None
    assert await exposition.body() is first  # counters may trail by one collection, no more
    await pending
    assert await exposition.body() is not first
    assert source.renders == 2
