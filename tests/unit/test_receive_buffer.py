"""The connection's receive buffer: frames cut out whatever the transport's read sizes."""

import random
import struct

import pytest

from broker.receive_buffer import INITIAL, FrameTooLarge, ReceiveBuffer


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _feed(rb: ReceiveBuffer, data: bytes, chunks) -> list[bytes]:
    """Write ``data`` the way a transport does: ask for a buffer, fill part of it."""
    out, pos = [], 0
    while pos < len(data):
        view = rb.writable(next(chunks))
        n = min(len(view), len(data) - pos, next(chunks))
        view[:n] = data[pos:pos + n]
        pos += n
        out += rb.written(n)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_frames_survive_any_split(seed):
    rng = random.Random(seed)
    bodies = [rng.randbytes(rng.choice([0, 1, 50, 16_000, 70_000, 300_000])) for _ in range(40)]
    sizes = iter(lambda: rng.choice([1, 3, 4, 5, 1000, 16_384, 65_536, 262_144]), None)
    assert _feed(ReceiveBuffer(1 << 20), b"".join(map(_frame, bodies)), sizes) == bodies


def test_a_large_frame_gets_room_for_all_of_it_then_the_buffer_shrinks():
    rb = ReceiveBuffer(1 << 20)
    body = bytes(500_000)
    rb.writable(-1)[:4] = _frame(body)[:4]
    assert rb.written(4) == []
    assert len(rb.writable(-1)) >= len(body)  # read in place, in as few reads as the transport likes
    rb.view[4:4 + len(body)] = body
    assert rb.written(len(body)) == [body]
    rb.writable(-1)
    assert len(rb.buf) == INITIAL


@pytest.mark.parametrize("size", [-1, (1 << 20) + 1])
def test_a_size_prefix_out_of_bounds_is_refused_before_any_allocation(size):
    rb = ReceiveBuffer(1 << 20)
    rb.writable(-1)[:4] = struct.pack(">i", size)
    with pytest.raises(FrameTooLarge) as exc:
        rb.written(4)
    assert exc.value.size == size
    assert len(rb.buf) == INITIAL


def test_an_idle_connection_holds_no_buffer_and_the_next_read_reuses_a_pooled_one():
    first, second = ReceiveBuffer(1 << 20), ReceiveBuffer(1 << 20)
    frame = _frame(b"request")
    first.writable(-1)[:3] = frame[:3]
    assert first.written(3) == [] and first.buf is not None  # part of a frame: kept
    first.view[3:len(frame)] = frame[3:]
    held = first.buf
    assert first.written(len(frame) - 3) == [b"request"]
    assert first.buf is None and first.view is None  # every frame cut out: nothing held
    second.writable(-1)
    assert second.buf is held  # the next connection to read takes it from the pool
