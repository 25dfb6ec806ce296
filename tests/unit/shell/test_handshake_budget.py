"""The handshake budget's bookkeeping (qinglong.shell.listener._Handshakes, _source): which budget a new
connection waits for, the turns sources take, the waiting connections a timeout takes off their queues, and
what counts as one source. The listener that uses it is tested over real TLS in
tests/integration/shell/test_budgets.py and test_flood_memory.py. Touches: socket pairs it closes.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator

import pytest

from qinglong.shell.config import BUDGETS
from qinglong.shell.listener import _Handshakes, _source

BUDGET = dataclasses.replace(BUDGETS["user_listener"], max_handshakes=3, max_handshakes_per_source=2)


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    made: list[socket.socket] = []
    yield made
    for sock in made:
        sock.close()


def _sock(made: list[socket.socket]) -> socket.socket:
    one, other = socket.socketpair()
    made += [one, other]
    return one


def test_a_source_waits_at_its_share_and_everyone_waits_when_the_listener_is_full() -> None:
    shakes = _Handshakes(BUDGET)
    assert shakes.over("a") is None
    shakes.begin("a")
    shakes.begin("a")
    assert shakes.over("a") == "max_handshakes_per_source"
    assert shakes.over("b") is None
    shakes.begin("b")
    assert shakes.over("c") == "max_handshakes" and shakes.over("a") == "max_handshakes"
    shakes.end("a")
    assert shakes.over("c") is None and shakes.by_source == {"a": 1, "b": 1}
    shakes.end("a")
    shakes.end("b")
    assert shakes.under_way == 0 and shakes.by_source == {}


def test_waiting_sources_take_turns_and_a_source_at_its_share_is_skipped(sockets: list[socket.socket]) -> None:
    shakes = _Handshakes(BUDGET)
    shakes.begin("a")
    shakes.begin("a")
    shakes.begin("b")  # full
    a1, a2, b1, c1 = (_sock(sockets) for _ in range(4))
    shakes.wait(a1, "a", 1.0)
    shakes.wait(a2, "a", 2.0)
    shakes.wait(b1, "b", 3.0)
    shakes.wait(c1, "c", 4.0)
    assert shakes.next() is None  # full
    shakes.end("b")  # a is still at its share: b goes first although a waited longer
    assert shakes.next() == (b1, "b", 3.0)
    shakes.begin("b")
    shakes.end("a")
    assert shakes.next() == (a1, "a", 1.0)
    shakes.begin("a")
    shakes.end("b")
    assert shakes.next() == (c1, "c", 4.0)  # a went to the back when it was served
    shakes.begin("c")
    assert shakes.next() is None
    assert list(shakes.waiting) == ["a"] and shakes.oldest() == 2.0


def test_waiting_connections_past_their_deadline_are_taken_off(sockets: list[socket.socket]) -> None:
    shakes = _Handshakes(BUDGET)
    old_a, new_a, old_b = (_sock(sockets) for _ in range(3))
    shakes.wait(old_a, "a", 1.0)
    shakes.wait(new_a, "a", 5.0)
    shakes.wait(old_b, "b", 2.0)
    assert shakes.expired(2.0) == [old_a, old_b]
    assert list(shakes.waiting) == ["a"] and shakes.oldest() == 5.0
    assert shakes.drain() == [new_a] and shakes.waiting == {} and shakes.oldest() is None


@pytest.mark.parametrize(
    ("address", "source"),
    [
        (("192.0.2.7", 40000), "192.0.2.7"),
        (("2001:db8:1:2:aaaa::1", 40000, 0, 0), "2001:db8:1:2::/64"),
        (("2001:db8:1:2:bbbb::9", 40001, 0, 0), "2001:db8:1:2::/64"),  # the same /64: the same source
        (("2001:db8:1:3::1", 40000, 0, 0), "2001:db8:1:3::/64"),
        (("fe80::1%eth0", 40000, 0, 2), "fe80::/64"),
    ],
)
def test_a_source_is_an_ipv4_address_or_an_ipv6_64(address: tuple[object, ...], source: str) -> None:
    assert _source(address) == source
