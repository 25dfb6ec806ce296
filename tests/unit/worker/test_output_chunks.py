"""The Worker's output arithmetic (worker/qinglong/worker/coordinator.py `next_chunk`): which bytes of a
stream go next, given the database's last answer; and, against a model of the database's append rules
(a replay stores only the new suffix; a jump past nextOffset only once the head is held), that a stream
costs its head and its tail on the wire and keeps both without a gap.
Touches nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from qinglong.wire.output import CHUNK_MAX_BYTES
from qinglong.worker.coordinator import Shipped, next_chunk


@pytest.mark.parametrize(
    ("size", "shipped", "limit", "expected"),
    [
        (0, None, 8, None),  # nothing written yet
        (5, None, 8, (0, 5)),  # not yet answered (a new task, a restarted Worker): from 0
        (20, None, 8, (0, 8)),  # one chunk at most
        (5, Shipped(5, 100, 50), 8, None),  # all sent
        (4, Shipped(5, 100, 50), 8, None),  # the database holds more than the file (never sent again)
        (30, Shipped(5, 100, 50), 64, (5, 25)),
        (10_000, Shipped(50, 100, 50), 64, (50, 64)),  # the head is not complete: no skip, however far behind
        (10_000, Shipped(100, 100, 50), 64, (9_950, 50)),  # head held, more than the tail unsent: skip
        (150, Shipped(100, 100, 50), 64, (100, 50)),  # exactly the tail unsent: no skip
        (10_000, Shipped(100, 100, 500), 128, (9_500, 128)),  # a tail longer than a chunk: its first chunk
        (100, Shipped(0, 0, 10), 64, (90, 10)),  # no head at all: straight to the tail
    ],
)
def test_next_chunk(size: int, shipped: Shipped | None, limit: int, expected: tuple[int, int] | None) -> None:
    assert next_chunk(size, shipped, limit) == expected


def test_the_default_limit_is_the_wire_s_chunk() -> None:
    assert next_chunk(10 * CHUNK_MAX_BYTES, None) == (0, CHUNK_MAX_BYTES)


@dataclass
class Model:
    """The database's rules for one stream, as ql_api.output_append_v1 states them."""

    head: int
    tail: int
    next_offset: int = 0
    kept: dict[int, bytes] = field(default_factory=dict)  # offset → bytes stored

    def append(self, offset: int, data: bytes) -> Shipped:
        if offset > self.next_offset and self.next_offset < self.head:
            raise AssertionError(f"a gap before the head: {offset} > {self.next_offset}")
        if offset < self.next_offset:  # a replay: only the new suffix
            data, offset = data[self.next_offset - offset :], max(offset, self.next_offset)
        if data:
            self.kept[offset] = data
            self.next_offset = offset + len(data)
        return Shipped(self.next_offset, self.head, self.tail)

    def covers(self, start: int, end: int, source: bytes) -> bool:
        """The kept chunks hold source[start:end] exactly."""
        return all(
            any(o <= i < o + len(d) and d[i - o] == source[i] for o, d in self.kept.items()) for i in range(start, end)
        )


def ship(model: Model, source: bytes, sizes: list[int], limit: int, shipped: Shipped | None = None) -> int:
    """One append per tick while the file grows through `sizes`, then a drain; the bytes on the wire."""
    wire = 0
    for size in sizes:
        planned = next_chunk(size, shipped, limit)
        if planned is not None:
            offset, length = planned
            shipped = model.append(offset, source[offset : offset + length])
            wire += length
    while (planned := next_chunk(len(source), shipped, limit)) is not None:
        offset, length = planned
        shipped = model.append(offset, source[offset : offset + length])
        wire += length
    return wire


@pytest.mark.parametrize(
    ("head", "tail", "limit", "size", "sizes"),
    [
        (1000, 1000, 256, 50_000, []),  # written at once, drained at the end
        (1000, 1000, 256, 50_000, list(range(0, 50_000, 7_000))),  # growing while ticks ship
        (1000, 100, 256, 50_000, list(range(0, 50_000, 300))),  # a tail shorter than a chunk
        (0, 300, 256, 5_000, [5_000]),  # no head
        (1000, 1000, 256, 1_500, [100, 900, 1_500]),  # shorter than head + tail: everything
    ],
)
def test_a_long_stream_costs_its_head_and_tail(head: int, tail: int, limit: int, size: int, sizes: list[int]) -> None:
    source = bytes(i * 7 % 251 for i in range(size))
    model = Model(head, tail)
    wire = ship(model, source, sizes, limit)
    assert model.next_offset == size
    assert model.covers(0, min(head, size), source), "a gap in the head"
    assert model.covers(max(0, size - tail), size, source), "a gap in the tail"
    ticks_after_head = sum(1 for s in sizes if s > head + tail)  # each may send one chunk the file then outgrows
    assert wire <= head + tail + limit * (1 + ticks_after_head)
    if size <= head + tail:
        assert model.covers(0, size, source) and wire == size


def test_a_restarted_worker_replays_from_zero_and_goes_on_where_the_database_is() -> None:
    source = bytes(range(256)) * 20
    model = Model(head=4096, tail=512)
    ship(model, source[:1000], [], 256)  # the first Worker shipped 1000 bytes, then was killed
    ship(model, source, [len(source)], 256, shipped=None)  # the new one knows nothing
    assert b"".join(d for _, d in sorted(model.kept.items()))[:4096] == source[:4096]
    assert sum(len(d) for d in model.kept.values()) <= 4096 + 512 + 256, "a duplicate was stored"
    assert model.covers(len(source) - 512, len(source), source)
