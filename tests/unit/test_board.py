"""The board: what pollers publish is what the web reads, judged fresh or stale when read."""

from __future__ import annotations

from exporter.board import Board
from exporter.model import Health, QueueStatus
from tests.unit.factories import view


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_view_goes_stale_on_the_board_without_a_new_publication() -> None:
    clock = Clock()
    board = Board(monotonic=clock)
    board.publish(QueueStatus(view("orders", fresh_until=5.0), None, None, None))
    before = board.verdict()
    assert board.views()[0].snapshot is not None
    assert board.readiness() == [("orders", None)]
    clock.now = 5.5
    stale = board.views()[0]
    assert stale.snapshot is None  # the gauges are withdrawn
    assert not stale.up
    assert stale.tallies is not None  # counters and health stay
    assert board.readiness() == [("orders", "no successful collection yet")]
    assert board.verdict() != before


def test_a_standby_is_never_judged_stale_and_says_why_it_is_not_ready() -> None:
    clock = Clock()
    board = Board(monotonic=clock)
    standby = view("mails", leader=False, collector=False, snapshot=None, tallies=None,
                   health=Health(up=False), up=False)  # fmt: skip
    board.publish(QueueStatus(standby, "connection refused", None, None))
    clock.now = 1e6
    assert board.statuses()[0].view is standby
    assert board.readiness() == [("mails", "connection refused")]


def test_publications_notify_listeners_and_arrange_keeps_the_configured_queues_in_order() -> None:
    board = Board(monotonic=Clock())
    calls: list[int] = []
    board.listeners.append(lambda: calls.append(1))
    for name in ("b", "a", "c"):
        board.publish(QueueStatus(view(name, fresh_until=1.0), None, None, None))
    assert len(calls) == 3
    generation = board.generation()
    board.arrange(["c", "a"])
    assert [v.queue for v in board.views()] == ["c", "a"]  # b was removed by a reload
    assert board.generation() != generation
    board.publish(QueueStatus(view("b", fresh_until=1.0), None, None, None))
    assert [v.queue for v in board.views()] == ["c", "a", "b"]
